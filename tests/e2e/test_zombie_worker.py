"""A worker lost with its machine mid-stage: nothing reports the stage run it was running, the Prefect server's
heartbeat automation marks it Crashed, and the iteration flow re-runs the stage on a fresh worker, which resumes from
the rows the lost one committed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from cli_processes import SMALLER_AFTER_EXPLORE, tracking_set
from repo_paths import ROOT, TINY
from solrl.flows.deploy import HEARTBEAT_AUTOMATION, HEARTBEAT_SECONDS, ensure_heartbeat_automation
from prefect_workers import (
    api,
    assert_resumed_then_equal_to_a_fresh_explore,
    committed,
    deployment_runs,
    process_workers,
    wait_for,
)
from solrl_core.run.rundir import STAGES, RunDir

POOL = "zw-pool"
TIMEOUT = 45  # seconds without heartbeat (the shortest the config takes): keeps the test short
EXPLORE = ["--set", "explore.seeds_per_prompt=16", "--set", "explore.batch_size=1"]  # 32 rows committed one by one
ROWS = 2 * 16


def _wait_for(predicate, timeout: float, what: str, poll: float = 0.1, alive=None):
    wait_for(predicate, timeout, what, poll, alive)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _delete_automation(session_env) -> None:
    with api(session_env) as client:
        for automation in client.read_automations_by_name(HEARTBEAT_AUTOMATION):
            client.delete_automation(automation.id)


@pytest.fixture
def no_automation(session_env):
    """No heartbeat automation before the test (earlier tests on the session's server — deploy, work pools — create
    it with the default timeout) nor after it (later tests make their own, with their timeout)."""
    _delete_automation(session_env)
    yield
    _delete_automation(session_env)


def test_automation_is_created_updated_only_when_it_differs(session_env, no_automation):
    ensure = ensure_heartbeat_automation.__wrapped__  # not the per-process cache
    with api(session_env) as client:
        assert [ensure(90), ensure(90), ensure(60), ensure(60)] == ["created", "unchanged", "updated", "unchanged"]
        (automation,) = client.read_automations_by_name(HEARTBEAT_AUTOMATION)
    trigger = automation.trigger
    assert trigger.posture == "Proactive" and trigger.within == timedelta(seconds=60)
    assert "prefect.flow-run.heartbeat" in trigger.after and "prefect.flow-run.heartbeat" in trigger.expect
    assert trigger.match_related.model_dump() == {"prefect.resource.role": "tag",
                                                  "prefect.resource.id": "prefect.tag.solrl"}
    (action,) = automation.actions
    assert action.type == "change-flow-run-state" and action.state.value == "CRASHED"


def test_stage_run_of_a_lost_worker_is_crashed_by_heartbeat_and_rerun(session_env, no_automation, tmp_path):
    run_dir = tmp_path / "zombie"
    partial = run_dir / "iter_0000" / "explore.partial" / "pool.zarr"
    (tmp_path / "lost").mkdir()
    (tmp_path / "fresh").mkdir()
    log = open(tmp_path / "train.log", "w")
    train = None
    try:
        with process_workers(session_env, [POOL], tmp_path / "lost") as (worker,):
            train = subprocess.Popen(
                [sys.executable, "-m", "solrl", "train", str(TINY), "--iterations", "1", "--run-dir",
                 str(run_dir), "--no-progress", *EXPLORE, *SMALLER_AFTER_EXPLORE,
                 "--set", f"orchestration.work_pools={{explore: {POOL}}}",
                 "--set", f"orchestration.heartbeat_timeout={TIMEOUT}", *tracking_set(session_env)],
                env=session_env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
            _wait_for(lambda: committed(partial) >= 3, 600, "explore to commit 3 rows",
                      alive=lambda: train.poll() is None)
            (lost,) = deployment_runs(session_env, f"solrl-stage/explore@{POOL}", run_dir)
            pid = int(lost.infrastructure_pid.rsplit(":", 1)[-1])
            assert "prefect.engine" in Path(f"/proc/{pid}/cmdline").read_text()
            group = os.getpgid(pid)  # the process worker starts each flow run in a process group of its own
            for pgid in (worker.pid, group):  # the worker and the stage's processes, as when the machine is lost
                os.killpg(pgid, signal.SIGKILL)
            killed_at = time.time()
            worker.wait()
            _wait_for(lambda: not _running(pid), 10, "the stage's process to die")
        rows = committed(partial)
        assert 3 <= rows < ROWS

        # nothing reported the loss: the run stays Running; a fresh worker does not take it over
        with process_workers(session_env, [POOL], tmp_path / "fresh"):
            time.sleep(2)
            (still,) = deployment_runs(session_env, f"solrl-stage/explore@{POOL}", run_dir)
            assert still.state_name == "Running"
            train.wait(timeout=600)
        assert train.returncode == 0, (tmp_path / "train.log").read_text()[-3000:]
    finally:
        if train is not None and train.poll() is None:
            os.killpg(train.pid, signal.SIGKILL)
            train.wait()

    # the automation marked the lost run Crashed once its heartbeats stopped; the iteration re-ran the stage
    runs = deployment_runs(session_env, f"solrl-stage/explore@{POOL}", run_dir)
    assert [r.state_name for r in runs] == ["Crashed", "Completed"] and runs[0].id == lost.id
    assert "no heartbeat" in runs[0].state.message
    crashed_after = runs[0].state.timestamp.timestamp() - killed_at
    # no sooner than the heartbeats allow; the upper bound leaves the server's triggers time on a machine busy with
    # other tests, far below the 10 minutes the train is given (what a lost run without the automation would take)
    assert TIMEOUT - HEARTBEAT_SECONDS - 5 < crashed_after < TIMEOUT + 120, crashed_after
    assert {s: RunDir(run_dir).stage_status(0, s) for s in STAGES} == {s: "complete" for s in STAGES}
    with api(session_env) as client:  # what made its process send heartbeats that often
        env = client.read_deployment_by_name(f"solrl-stage/explore@{POOL}").job_variables["env"]
    assert env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == str(HEARTBEAT_SECONDS)

    # the re-run resumed from the rows the lost worker committed, and the pool equals an uninterrupted explore
    assert_resumed_then_equal_to_a_fresh_explore(run_dir, ROWS, killed_at, min_kept=rows)
