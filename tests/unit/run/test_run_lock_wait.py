"""A second stage run of a run directory waits for the one holding it (saying whom it waits for), up to a timeout
(--lock-wait, SOLRL_LOCK_WAIT, default 10 minutes), then refuses in one line; a lock whose holder died is taken at
once. A stage deployment refuses an iteration the run does not have as the CLI does (a `solrl stage` process that
waits: tests/e2e/test_run_lock_wait_cli.py)."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid

import pytest

from held_runs import HOLDER, held_by_another
from held_runs import run_dir  # noqa: F401 - a fixture: the tiny run, prepared
from solrl_core.errors import RunDirLockedError, SolrlError
from solrl_core.run.rundir import RunDir
from solrl_core.run.storage import LOCK_WAIT_ENV, LOCK_WAIT_SECONDS, lock_wait_seconds


def test_the_lock_names_its_holder_and_a_second_holder_waits_for_it(tmp_path):
    run = RunDir(tmp_path / "run")
    with run.hold():
        assert (run.root / ".lock").read_text().startswith(
            f"pid {os.getpid()} on host {socket.gethostname()} since ")
    said = []
    start = time.monotonic()
    with held_by_another(run, release_after=1.0), run.hold(wait=60, say=said.append):
        waited = time.monotonic() - start
        assert (run.root / ".lock").read_text().startswith(f"pid {os.getpid()} ")
    assert 1.0 <= waited < 30
    assert said == [f"solrl: waiting for the run directory's lock, held by {HOLDER} (up to 60 s: --lock-wait or "
                    f"{LOCK_WAIT_ENV} says how long)"]


def test_past_the_wait_the_refusal_is_one_line(tmp_path):
    run = RunDir(tmp_path / "run")
    said = []
    with held_by_another(run):
        start = time.monotonic()
        with pytest.raises(RunDirLockedError) as info, run.hold(wait=0.6, say=said.append):
            pass
        assert time.monotonic() - start >= 0.6
        assert str(info.value) == (f"run directory {run.root} is held by {HOLDER} (waited 0.6 s); wait for it to "
                                   "finish or use another --run-dir")
        assert len(said) == 1
        said.clear()
        with pytest.raises(RunDirLockedError, match=f"is held by {HOLDER}; wait"), run.hold(say=said.append):
            pass  # the default: no wait (the other commands), nothing said
        assert said == []


def test_a_lock_whose_holder_died_is_taken_at_once(tmp_path):
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    (run.root / ".lock").write_text(HOLDER)  # written by a process that is gone: the OS released its lock
    said = []
    with run.hold(wait=60, say=said.append):
        assert said == []


def test_a_lease_on_an_object_store_is_waited_for_and_an_abandoned_one_taken_over():
    import json

    run = RunDir(f"memory://solrl-tests/lease-{uuid.uuid4().hex[:8]}")
    first, said = RunDir(str(run.root)).hold(), []
    first.__enter__()
    timer = threading.Timer(1.0, first.__exit__, (None, None, None))
    timer.start()
    start = time.monotonic()
    with run.hold(wait=60, say=said.append):
        assert time.monotonic() - start >= 1.0
    timer.join()
    assert len(said) == 1 and f"held by pid {os.getpid()} on host {socket.gethostname()} since " in said[0]
    with RunDir(str(run.root)).hold(), pytest.raises(RunDirLockedError, match=r"lease renewed \d+ s ago\) \(waited"):
        with run.hold(wait=0.5, say=said.append):
            pass
    (run.root / ".lock").write_text(json.dumps({"owner": "a killed run", "token": "old", "heartbeat": 0.0,
                                                "seconds": 60}))
    said.clear()
    with run.hold(wait=60, say=said.append):
        assert said == []


def test_how_long_a_stage_waits(monkeypatch):
    monkeypatch.delenv(LOCK_WAIT_ENV, raising=False)
    assert lock_wait_seconds() == LOCK_WAIT_SECONDS == 600
    monkeypatch.setenv(LOCK_WAIT_ENV, "5")
    assert lock_wait_seconds() == 5 and lock_wait_seconds(0) == 0  # the option wins
    for bad in ("soon", "-1", "inf"):
        monkeypatch.setenv(LOCK_WAIT_ENV, bad)
        with pytest.raises(SolrlError, match="seconds"):
            lock_wait_seconds()


def test_solrl_stage_waits_then_refuses_in_one_line(run_dir, capsys):
    from solrl.cli.main import main

    capsys.readouterr()
    with held_by_another(run_dir):
        code = main(["stage", "quantize", "--run-dir", str(run_dir.root), "--iteration", "0", "--lock-wait", "0.5"])
    assert code == 2
    waiting, error = capsys.readouterr().err.strip().splitlines()
    assert waiting.startswith(f"solrl: waiting for the run directory's lock, held by {HOLDER} (up to 0.5 s")
    assert error == (f"solrl: error: run directory {run_dir.root} is held by {HOLDER} (waited 0.5 s); wait for it to "
                     "finish or use another --run-dir")


def test_a_stage_deployment_refuses_an_iteration_past_the_run_as_the_cli_does(run_dir):
    from solrl.flows.stage import stage_flow

    for iteration in (2, 6, -1):
        with pytest.raises(SolrlError, match=f"^iteration {iteration} is out of range: the run has 2 iterations, "
                           "numbered 0 to 1"):
            stage_flow.fn(str(run_dir.root), "update", iteration, hold=True)
    assert not (run_dir.root / ".lock").exists()  # refused before taking the run
