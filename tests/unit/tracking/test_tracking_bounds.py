"""MLflow failures while logging, without a server: the logging thread's bounds (flows/tracking_queue.py) and which
errors become the one-line TrackingFailed (flows/tracking.py). End to end with a real server: test_mlflow_outage.py."""

from __future__ import annotations

import json
import sqlite3
import threading
import time

import pytest

from cli_processes import free_port
from solrl.flows import tracking
from solrl.flows.tracking_queue import DRAIN_WAIT_ENV, TrackingQueue, TrackingStalled, drain_wait_seconds
from solrl_core.errors import SolrlError
from solrl_core.run.rundir import RunDir, write_json_atomic

# How long a stuck logging would last (the test releases it at its end): far above the drain's wait of under a second,
# so that a drain bounded by the wait is told from one that waits for the logging, however busy the machine.
STUCK_S = 120


def test_after_a_logging_error_the_queued_ones_are_not_started():
    started, gate = [], threading.Event()

    def fail():
        gate.wait(10)
        raise tracking.TrackingFailed("MLflow at http://x failed")

    with pytest.raises(tracking.TrackingFailed):
        with TrackingQueue(wait=10) as queue:
            queue.submit(fail)
            for i in range(3):
                queue.submit(started.append, i)  # queued behind the failing one
            gate.set()
    assert started == []  # MLflow was not asked again: the next run logs them


def test_a_logging_stuck_in_mlflow_ends_the_drain_after_the_wait_naming_what_it_logs():
    release = threading.Event()

    def stuck(run, cfg, iteration):
        release.wait(STUCK_S)

    stuck.describe = lambda run, cfg, iteration: f"iteration {iteration} to http://127.0.0.1:1"
    started = time.monotonic()
    try:
        with pytest.raises(TrackingStalled) as info:
            with TrackingQueue(wait=0.5) as queue:
                queue.submit(stuck, None, None, 3)
        took = time.monotonic() - started
    finally:
        release.set()
    message = str(info.value)
    assert 0.5 <= took < STUCK_S / 2 and "\n" not in message  # the wait, not the stuck logging
    assert "MLflow logging of iteration 3 to http://127.0.0.1:1 has not finished after a wait of 0.5 s" in message
    assert f"{DRAIN_WAIT_ENV}=SECONDS" in message and "run the same command again" in message


def test_each_logging_gets_the_wait_after_the_one_before_it():
    """A queue of loggings that each take less than the wait is drained, however long they take together."""
    done = []
    with TrackingQueue(wait=0.4) as queue:
        for i in range(4):
            queue.submit(lambda i=i: (time.sleep(0.2), done.append(i)))
    assert done == [0, 1, 2, 3]


def test_a_stopped_block_waits_for_a_stuck_logging_at_most_the_wait():
    release = threading.Event()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            with TrackingQueue(wait=0.3) as queue:
                queue.submit(release.wait, STUCK_S)
                raise KeyboardInterrupt
        assert time.monotonic() - started < STUCK_S / 2  # the wait, not the stuck logging
    finally:
        release.set()


@pytest.mark.parametrize("value, ok", [("", 60.0), ("12.5", 12.5), ("0", None), ("inf", None), ("soon", None)])
def test_the_wait_from_the_environment(monkeypatch, value, ok):
    monkeypatch.setenv(DRAIN_WAIT_ENV, value)
    if ok is None:
        with pytest.raises(SolrlError, match=DRAIN_WAIT_ENV):
            drain_wait_seconds()
    else:
        assert drain_wait_seconds() == ok


def _api_error(url: str):
    from mlflow.exceptions import MlflowException

    return MlflowException(f"API request to {url}/api/2.0/mlflow/runs/log-batch failed with exception "
                           "HTTPConnectionPool(host='127.0.0.1'): Max retries exceeded")


def test_which_errors_are_mlflow_failing_and_which_are_bugs(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: refused at once
    error = tracking.tracking_failure(_api_error(dead), dead, "iteration 2")
    assert isinstance(error, tracking.TrackingFailed)
    message = str(error)
    assert message.startswith(f"MLflow at {dead} failed while logging iteration 2 (") and "refused" in message
    assert "run the same command again" in message and "\n" not in message

    store = f"sqlite:///{tmp_path / 'mlruns.db'}"
    try:
        raise RuntimeError("wrapped") from sqlite3.OperationalError("database or disk is full")
    except RuntimeError as exc:
        disk = tracking.tracking_failure(exc, store, "the evaluation after 2 iterations")
    assert "database error: database or disk is full" in str(disk)

    assert tracking.tracking_failure(KeyError("reward/train_mean"), store, "iteration 2") is None  # a bug
    with pytest.raises(KeyError):
        with tracking.tracking_errors(store, "iteration 2"):
            raise KeyError("reward/train_mean")
    with pytest.raises(tracking.TrackingFailed, match=f"MLflow at {dead} failed while logging iteration 2"):
        with tracking.tracking_errors(dead, "iteration 2"):
            raise _api_error(dead)


def test_a_relative_sqlite_store_is_recorded_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert tracking.store_location("sqlite:///mlruns.db") == f"sqlite:///{tmp_path / 'mlruns.db'}"
    for uri in (f"sqlite:///{tmp_path / 'x.db'}", "http://127.0.0.1:5000", "sqlite:///:memory:"):
        assert tracking.store_location(uri) == uri


def test_markers_say_which_mlflow_run_they_were_logged_to(tmp_path):
    run = RunDir(tmp_path / "run")
    marker = run.iteration_dir(0) / "manifests" / "logged.json"
    info = {"tracking_uri": "sqlite:///x.db", "mlflow_run_id": "new"}
    write_json_atomic(marker, {"iteration": 0, "id": "u1", "mlflow_run_id": "new"})
    assert tracking._logged(marker, info, "u1")
    assert not tracking._logged(marker, info, "u2")  # the update was computed again
    assert not tracking._logged(marker, {**info, "mlflow_run_id": "other"}, "u1")  # logged to another MLflow run
    assert not tracking._logged(marker, None, "u1")
    write_json_atomic(marker, {"iteration": 0, "id": "u1"})  # written before markers named their run
    assert tracking._logged(marker, info, "u1")

    audit, evaluation = run.iteration_dir(0) / "manifests" / tracking.AUDIT_MARKER, run.eval_dir(2) / "logged.json"
    for path in (audit, evaluation):
        write_json_atomic(path, {})
    write_json_atomic(run.manifest_path(0, "update"), {"files": {}})
    assert sorted(tracking.logged_markers(run)) == sorted([marker, audit, evaluation])
    tracking.forget_logged(run)
    assert not any(p.exists() for p in (marker, audit, evaluation)) and run.is_complete(0, "update")
    assert json.loads(run.manifest_path(0, "update").read_text()) == {"files": {}}
