"""The MLflow run is RUNNING while solrl trains it and ends FINISHED, KILLED (a stop: Ctrl-C, SIGTERM, SIGHUP reach
the flow as KeyboardInterrupt) or FAILED (an error) with the training; a run made outside a training is ended at once
(flows/tracking_status.py)."""

from __future__ import annotations

import pytest

from mlflow_stand_in import fresh_routes  # noqa: F401 - autouse: each test asks tracking.route afresh
from mlflow_stand_in import sqlite_store, tracking_config
from solrl.flows import tracking
from solrl.flows.tracking_status import mlflow_run_training
from solrl_core.inspect import logged_marker
from solrl_core.run.rundir import RunDir


def _status(store: str, run_id: str) -> str:
    import mlflow

    return mlflow.MlflowClient(tracking_uri=store).get_run(run_id).info.status


@pytest.mark.e2e  # no process, but a new MLflow sqlite store takes ~6 s to create (its schema migrations)
def test_the_mlflow_run_is_running_while_it_trains_and_ends_with_the_training(tmp_path):
    store = sqlite_store(tmp_path / "mlruns.db")
    cfg = tracking_config(uri=store, experiment="status")
    run = RunDir(tmp_path / "run")

    with mlflow_run_training(run, cfg) as info:
        run_id = info["mlflow_run_id"]
        assert _status(store, run_id) == "RUNNING"
        with mlflow_run_training(run, cfg) as inner:  # the flow's block inside the CLI's: only the outer one ends it
            assert inner["mlflow_run_id"] == run_id
        assert _status(store, run_id) == "RUNNING"
    assert _status(store, run_id) == "FINISHED"

    with pytest.raises(KeyboardInterrupt), mlflow_run_training(run, cfg):  # the resumed run, then stopped
        assert _status(store, run_id) == "RUNNING"
        raise KeyboardInterrupt
    assert _status(store, run_id) == "KILLED"

    with pytest.raises(RuntimeError, match="a stage failed"), mlflow_run_training(run, cfg):
        raise RuntimeError("a stage failed")
    assert _status(store, run_id) == "FAILED"

    other = RunDir(tmp_path / "other")  # made by a command that does not train it (an evaluation, a stage)
    assert _status(store, tracking.ensure_mlflow_run(other, cfg)["mlflow_run_id"]) == "FINISHED"


@pytest.mark.e2e  # a new MLflow sqlite store
def test_a_run_whose_run_json_was_deleted_says_it_logs_to_a_new_mlflow_run(tmp_path):
    """run.json deleted after the run logged: the next command makes a new MLflow run, says so in one line naming the
    file, and forgets what was logged so the earlier iterations go to the new run; a first run says nothing."""
    store = sqlite_store(tmp_path / "mlruns.db")
    cfg = tracking_config(uri=store, experiment="lost")
    run = RunDir(tmp_path / "run")
    said = []
    first = tracking.ensure_mlflow_run(run, cfg, say=said.append)["mlflow_run_id"]
    assert said == []
    marker = logged_marker(run, 0)  # what a logged iteration leaves
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")
    assert marker in tracking.logged_markers(run), tracking.logged_markers(run)
    run.run_json.unlink()
    second = tracking.ensure_mlflow_run(run, cfg, say=said.append)["mlflow_run_id"]
    assert second != first and len(said) == 1
    assert str(run.run_json) in said[0] and second in said[0] and "was missing" in said[0]
    assert not marker.exists()  # logged again into the new run
