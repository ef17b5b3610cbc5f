"""Runs whose MLflow artifacts need a server that is not there are refused in one line, new and resumed, until the
store's server answers again (a new sqlite store takes ~6 s to create: kept out of `make test-fast`; the links
themselves: tests/unit/tracking/test_mlflow_links.py)."""

from __future__ import annotations

import pytest

from mlflow_stand_in import fresh_routes  # noqa: F401 - autouse: each test asks tracking.route afresh
from mlflow_stand_in import health_server, sqlite_store, tracking_config
from solrl.flows import tracking
from solrl.flows.service_checks import check_tracking
from solrl_core.errors import SolrlError
from solrl_core.mlflow_links import record_server
from solrl_core.run.rundir import RunDir, write_json_atomic


def _experiment(store: str, name: str, artifact_location: str) -> str:
    import mlflow

    return mlflow.MlflowClient(tracking_uri=store).create_experiment(name, artifact_location=artifact_location)


@pytest.mark.e2e  # no process, but a new MLflow sqlite store takes ~6 s to create (its schema migrations)
def test_runs_whose_artifacts_need_a_server_that_is_not_there_are_refused_in_one_line(tmp_path):
    import mlflow

    store = sqlite_store(tmp_path / "mlruns.db")
    _experiment(store, "solrl", "mlflow-artifacts:/1")  # made through `make server`'s MLflow, in the same file
    _experiment(store, "local", (tmp_path / "mlartifacts").as_uri())
    with pytest.raises(SolrlError) as new_run:
        check_tracking(tracking_config(uri=store))
    message = str(new_run.value)
    assert "experiment 'solrl'" in message and "mlflow-artifacts:/1" in message and "\n" not in message
    assert f"`make server` in {tmp_path}" in message and "tracking.experiment" in message
    assert check_tracking(tracking_config(uri=store, experiment="local")) == store  # artifacts in files: no server needed
    assert check_tracking(tracking_config(uri=store, experiment="new")) == store

    # a resumed run: the MLflow run of run.json is checked, whatever the config says
    client = mlflow.MlflowClient(tracking_uri=store)
    run_id = client.create_run(client.get_experiment_by_name("solrl").experiment_id).info.run_id
    run = RunDir(tmp_path / "run")
    write_json_atomic(run.run_json, {"tracking_uri": store, "mlflow_run_id": run_id, "experiment_id": "1"})
    with pytest.raises(SolrlError, match=f"MLflow run {run_id} in {store} keeps its artifacts on an MLflow server"):
        check_tracking(tracking_config(experiment="local"), run)
    with pytest.raises(SolrlError, match="keeps its artifacts on an MLflow server"):  # also where flows start it
        tracking.ensure_mlflow_run(run, tracking_config())

    with health_server() as uri:  # the store's server runs again: both go through it
        record_server(store, uri)
        tracking.route.cache_clear()
        assert check_tracking(tracking_config(uri=store)) == uri
        assert check_tracking(tracking_config(), run) == uri
