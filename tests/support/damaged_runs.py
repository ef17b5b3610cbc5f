"""An undamaged tiny run and copies of it to damage (tests/unit/run/test_integrity.py in process,
tests/e2e/test_integrity_cli.py through the CLI): the module-scoped `reference` fixture, the one-line refusal a damaged
artifact must give, and the checkpoint its rebuild must reach."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.errors import DamagedArtifactError
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run_config import load_run_config, prepare_run
from solrl_core.stages.runner import run_stage

FAST = ["explore.precision=fp32", "explore.seeds_per_prompt=4", "select.k=2", "train.micro_batch=4"]
CHECKPOINT_FILES = ("adapters.safetensors", "ema.safetensors", "optimizer.safetensors")


def integrity_config():
    return load_config(TINY, FAST)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, one_torch_thread):
    """An undamaged run: iteration 0, and the quantize stage of iteration 1 (a consumer of its checkpoint)."""
    run = RunDir(tmp_path_factory.mktemp("integrity") / "reference")
    cfg = prepare_run(run, integrity_config())
    for stage in STAGES:
        run_stage(run, cfg, 0, stage, progress=False)
    run_stage(run, cfg, 1, "quantize", progress=False)
    return run


def copy_run(reference: RunDir, tmp_path: Path, *invalidate: tuple[int, str]) -> tuple[RunDir, object]:
    shutil.copytree(reference.root, tmp_path / "run")
    run = RunDir(tmp_path / "run")
    for iteration, stage in invalidate:
        run.invalidate(iteration, stage)
    return run, load_run_config(run)


def assert_refused(call, artifact: str, what: str, remedy: str) -> str:
    with pytest.raises(DamagedArtifactError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and artifact in message and what in message and remedy in message, message
    return message


def rebuild_command(run: RunDir, stage: str, iteration: int = 0) -> str:
    return f"solrl stage {stage} --run-dir {run.root} --iteration {iteration} --force"


def assert_same_checkpoint(run: RunDir, reference: RunDir, iteration: int = 0) -> None:
    for name in CHECKPOINT_FILES:
        got = load_file(str(run.checkpoint_dir(iteration) / name))
        want = load_file(str(reference.checkpoint_dir(iteration) / name))
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), name


def files_under(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())
