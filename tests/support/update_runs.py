"""A tiny run ready for its update stage, shared by the update's tests in process (tests/unit/rl/
test_distributed_update.py) and on torchrun processes (tests/e2e/test_distributed_update_processes.py): the
module-scoped `ready_for_update` fixture, copies of it with other train settings, and a rank without a process group."""

from __future__ import annotations

import shutil

import pytest

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.rl.distributed import GradientSync
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import prepare_run
from solrl_core.stages.runner import run_stage

BEFORE_UPDATE = ("quantize", "explore", "score_explore", "select", "regenerate", "score_final")


@pytest.fixture(scope="module")
def ready_for_update(tmp_path_factory, one_torch_thread):
    """A tiny run whose iteration 0 is complete up to score_final (8 samples x 3 times = 24 pairs), 2 steps."""
    cfg = load_config(TINY, ["train.optimizer_steps=2"])
    run = RunDir(tmp_path_factory.mktemp("dist") / "base")
    prepare_run(run, cfg)
    for stage in BEFORE_UPDATE:
        run_stage(run, cfg, 0, stage, progress=False)
    return run, cfg


def copy_for_update(base: RunDir, cfg, path, **train) -> tuple[RunDir, object]:
    """A copy of the run ready for its update, and its config with `train` settings changed."""
    run = RunDir(path)
    shutil.copytree(base.root, run.root)
    cfg = cfg.model_copy(deep=True)
    cfg.train = type(cfg.train).model_validate({**cfg.train.model_dump(), **train})
    return run, cfg


class Rank(GradientSync):
    """Rank `rank` of `world_size`, without a process group (what to shard only)."""

    def __init__(self, rank, world_size):
        self.rank, self.world_size = rank, world_size
