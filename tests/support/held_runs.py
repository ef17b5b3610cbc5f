"""A run directory whose lock another holder has (tests/unit/run/test_run_lock_wait.py in process,
tests/e2e/test_run_lock_wait_cli.py a `solrl stage` process): `held_by_another`, the holder it names, and the
`run_dir` fixture (the tiny run, prepared)."""

from __future__ import annotations

import contextlib
import fcntl
import threading

import pytest

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import prepare_run

HOLDER = "pid 4242 on host elsewhere since 2025-01-31 14:02:07"


@contextlib.contextmanager
def held_by_another(run: RunDir, release_after: float | None = None):
    """The run's lock held through another open file (as another process holds it), named HOLDER; released after
    `release_after` seconds from a timer thread, else when the block ends."""
    run.root.mkdir(parents=True, exist_ok=True)
    fh = open(run.root / ".lock", "a+")
    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    fh.truncate(0)
    fh.write(HOLDER)
    fh.flush()
    timer = threading.Timer(release_after, fh.close) if release_after is not None else None
    if timer is not None:
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.join()
        fh.close()


@pytest.fixture
def run_dir(tmp_path):
    run = RunDir(tmp_path / "run")
    prepare_run(run, load_config(TINY))  # 2 iterations
    return run
