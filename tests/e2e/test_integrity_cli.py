"""Damaged artifacts refused through the CLI too (one line, exit 2: the file, what is wrong, the command that
rebuilds it); after that command the run goes on to the checkpoint an undamaged run reaches (the other damages, in
process: tests/unit/run/test_integrity.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from solrl_core.run.rundir import STAGES
from solrl_core.run_config import load_run_config, prepare_run
from solrl_core.stages.runner import run_stage
from repo_paths import ROOT
from damaged_runs import (assert_refused, assert_same_checkpoint, copy_run, files_under, integrity_config,
                          rebuild_command)
from damaged_runs import reference  # noqa: F401 - a fixture: the undamaged run

def _cli_refusal(*args: str) -> str:
    """The one line `solrl ARGS` exits with (code 2, no traceback)."""
    proc = subprocess.run([sys.executable, "-m", "solrl", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.e2e  # also through the CLI
def test_truncated_image_chunk_of_the_explore_pool(reference, tmp_path, one_torch_thread):
    run, cfg = copy_run(reference, tmp_path)
    image = [p for p in files_under(run.stage_dir(0, "explore") / "pool.zarr" / "image") if p.name != "zarr.json"][0]
    size = image.stat().st_size
    image.write_bytes(image.read_bytes()[: size // 2])
    assert_refused(lambda: run_stage(run, cfg, 0, "score_explore", force=True, progress=False),
             image.relative_to(run.root).as_posix(), f"size {size // 2} != recorded {size}", rebuild_command(run, "explore"))
    line = _cli_refusal("stage", "score_explore", "--run-dir", str(run.root), "--iteration", "0", "--force")
    assert image.relative_to(run.root).as_posix() in line and rebuild_command(run, "explore") in line
    assert run.is_complete(0, "score_explore")  # the refusal comes before the forced stage discards anything
    run_stage(run, cfg, 0, "explore", force=True, progress=False)
    for stage in STAGES[STAGES.index("score_explore"):]:
        run_stage(run, cfg, 0, stage, force=True, progress=False)
    assert_same_checkpoint(run, reference)


@pytest.mark.e2e  # also through the CLI
def test_truncated_frozen_config(reference, tmp_path, one_torch_thread):
    run, _ = copy_run(reference, tmp_path, (0, "update"))
    text = run.config_path.read_text()
    run.config_path.write_text(text[: len(text) // 2])
    remedy = f"delete {run.config_path} and run solrl train THAT_CONFIG --run-dir {run.root}"
    assert_refused(lambda: load_run_config(run), str(run.config_path), "content changed", remedy)
    assert "config.yaml is damaged" in _cli_refusal("stage", "update", "--run-dir", str(run.root), "--iteration", "0")
    run.config_path.write_bytes(b"\xff\xfe" + text.encode()[2:])  # garbled: no longer UTF-8 text
    assert_refused(lambda: load_run_config(run), str(run.config_path), "damaged", remedy)
    run.config_path.unlink()  # the remedy: freeze the original config again
    prepare_run(run, integrity_config())
    run_stage(run, load_run_config(run), 0, "update", progress=False)
    assert_same_checkpoint(run, reference)


