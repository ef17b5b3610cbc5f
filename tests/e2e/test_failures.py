"""Failures on a Prefect server: a stage process killed on its worker is retried by Prefect and resumes from the
pool's committed rows; a training flow cancelled through the API leaves a run directory that `solrl train` resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.states import Cancelling

from cli_processes import SMALLER_AFTER_EXPLORE, tracking_set
from repo_paths import ROOT, TINY
from solrl.cli.main import main
from prefect_workers import (
    api,
    assert_resumed_then_equal_to_a_fresh_explore,
    child_runs,
    committed,
    deployment_runs,
    process_workers,
    row_mtimes,
    wait_for,
)
from solrl_core.run.rundir import STAGES, RunDir

POOL = "fl-pool"
# 32 candidates committed one by one, at tiny.yaml's steps: a window of many batches to stop explore in
EXPLORE = ["--set", "explore.seeds_per_prompt=16", "--set", "explore.batch_size=1"]
ROWS = 2 * 16


@pytest.fixture(scope="module")
def worker(session_env, tmp_path_factory):
    with process_workers(session_env, [POOL], tmp_path_factory.mktemp("workers")) as procs:
        yield procs


def _wait_for(predicate, timeout: float, what: str, poll: float = 0.05, alive=None):
    wait_for(predicate, timeout, what, poll, alive)


def _row_mtimes(pool_zarr: Path) -> np.ndarray:
    return row_mtimes(pool_zarr, ROWS)


def _status(run_dir: Path) -> dict:
    return {stage: RunDir(run_dir).stage_status(0, stage) for stage in STAGES}


def test_killed_stage_process_is_retried_and_resumes_from_committed_rows(session_env, worker, tmp_path):
    run_dir = tmp_path / "crash"
    partial = run_dir / "iter_0000" / "explore.partial" / "pool.zarr"
    log = open(tmp_path / "train.log", "w")
    train = subprocess.Popen(
        [sys.executable, "-m", "solrl", "train", str(TINY), "--iterations", "1", "--run-dir", str(run_dir),
         "--no-progress", *EXPLORE, *SMALLER_AFTER_EXPLORE, "--set", f"orchestration.work_pools={{explore: {POOL}}}",
         *tracking_set(session_env)],
        env=session_env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        _wait_for(lambda: committed(partial) >= 3, 600, "explore to commit 3 rows", alive=lambda: train.poll() is None)
        (first,) = deployment_runs(session_env, f"solrl-stage/explore@{POOL}", run_dir)
        pid = int(first.infrastructure_pid.rsplit(":", 1)[-1])  # set by the worker when the process started
        assert "prefect.engine" in Path(f"/proc/{pid}/cmdline").read_text()
        os.kill(pid, signal.SIGKILL)  # the stage's process on the worker, mid-stage
        killed_at = time.time()
        train.wait(timeout=600)
    finally:
        if train.poll() is None:
            os.killpg(train.pid, signal.SIGKILL)
            train.wait()
    assert train.returncode == 0, (tmp_path / "train.log").read_text()[-3000:]

    # Prefect saw the crash and ran the stage again on the pool; the iteration completed
    runs = deployment_runs(session_env, f"solrl-stage/explore@{POOL}", run_dir)
    assert [r.state_name for r in runs] == ["Crashed", "Completed"] and runs[0].id == first.id
    assert all(r.work_pool_name == POOL for r in runs)
    assert _status(run_dir) == {s: "complete" for s in STAGES}

    # the retry resumed from the committed rows, and the pool equals an uninterrupted explore of the same seeds
    assert_resumed_then_equal_to_a_fresh_explore(run_dir, ROWS, killed_at, min_kept=3)


def test_cancelled_training_flow_leaves_a_run_that_train_resumes(run_cli, session_env, worker, tmp_path):
    run_dir = tmp_path / "cancel"
    partial = run_dir / "iter_0000" / "explore.partial" / "pool.zarr"
    overrides = [*EXPLORE, *SMALLER_AFTER_EXPLORE, *tracking_set(session_env), "--set", "iterations=1"]
    # `solrl deploy` in process (through the CLI: test_deploy.py)
    with temporary_settings(updates={PREFECT_API_URL: session_env["PREFECT_API_URL"]}):
        assert main(["deploy", str(TINY), "--run-dir", str(run_dir), "--name", "cancel-test", *overrides,
                     "--set", f"orchestration.work_pools={{explore: {POOL}}}", "--set",
                     f"orchestration.flow_pool={POOL}"]) == 0
    with api(session_env) as client:
        flow_run = run_deployment("solrl-train-config/cancel-test", timeout=0)
        final = lambda: client.read_flow_run(flow_run.id).state.is_final()  # noqa: E731
        _wait_for(lambda: committed(partial) >= 3 or final(), 600, "explore to commit 3 rows", poll=0.2)
        assert not final(), client.read_flow_run(flow_run.id).state
        client.set_flow_run_state(flow_run.id, Cancelling(message="cancelled by the test"))
        _wait_for(lambda: final() and all(r.state.is_final() for r in child_runs(session_env, flow_run.id)),
                  180, "the flow run and its subflows to end", poll=1)
        assert client.read_flow_run(flow_run.id).state.is_cancelled()
    (explore_run,) = deployment_runs(session_env, f"solrl-stage/explore@{POOL}", run_dir)
    assert explore_run.state.is_cancelled(), explore_run.state

    # consistent: nothing writes any more, nobody holds the run, manifests only for finished stages
    rows = committed(partial)
    assert 3 <= rows < ROWS
    time.sleep(2)
    assert committed(partial) == rows
    with RunDir(run_dir).hold():
        pass
    status = _status(run_dir)
    assert status["quantize"] == "complete" and status["explore"] == "partial"
    assert all(status[s] == "pending" for s in STAGES[2:])
    cancelled_at = time.time()

    # `solrl train` (here with every stage in process: where stages run may change on resume) completes the run
    run_cli("train", str(TINY), "--run-dir", str(run_dir), "--no-progress", *overrides)
    assert _status(run_dir) == {s: "complete" for s in STAGES}
    mtimes = _row_mtimes(run_dir / "iter_0000" / "explore" / "pool.zarr")
    assert (mtimes[:rows] < cancelled_at).all() and (mtimes[rows:] > cancelled_at).all()
