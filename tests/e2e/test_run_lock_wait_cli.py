"""A second `solrl stage` process on a run directory that another holds: it says whom it waits for, then runs the
stage once the run is free (the lock and its waits in process: tests/unit/run/test_run_lock_wait.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from repo_paths import ROOT
from solrl_core.run.storage import LOCK_WAIT_ENV
from held_runs import HOLDER, held_by_another
from held_runs import run_dir  # noqa: F401 - a fixture: the tiny run, prepared

@pytest.mark.e2e
def test_a_second_solrl_stage_waits_for_the_first_and_then_runs(session_env, run_dir):
    """`solrl stage` (a process) while the run is held: it says it waits, then runs the stage once it is free."""
    env = {**session_env, LOCK_WAIT_ENV: "300"}
    with held_by_another(run_dir):
        proc = subprocess.Popen([sys.executable, "-m", "solrl", "stage", "quantize", "--run-dir",
                                 str(run_dir.root), "--iteration", "0", "--quiet"], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = proc.stderr.readline()
        assert first.startswith(f"solrl: waiting for the run directory's lock, held by {HOLDER} (up to 300 s"), first
        assert proc.poll() is None and not run_dir.is_complete(0, "quantize")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert run_dir.is_complete(0, "quantize")
