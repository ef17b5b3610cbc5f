"""Where solrl logs to and what it links (no process started: an in-thread HTTP server stands in for MLflow's health
endpoint): the store of a new run, the MLflow server of `make server` serving a sqlite store (its record), runs whose
artifacts need a server refused in one line, links in MLflow's training view, the few params MLflow's image card
shows, and `solrl deploy` filling in the server it found."""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import ROOT, TINY
from flows import tracking
from flows.preflight import check_tracking
from solrl_core.config.loading import load_config
from solrl_core.errors import SolrlError
from solrl_core.mlflow_links import (RECORD_SUFFIX, TRAINING_VIEW, UI_HOST, UI_PORT, record_server, run_link,
                                     server_record, serving_server)
from solrl_core.run.rundir import RunDir, write_json_atomic


@contextlib.contextmanager
def health_server():
    """An HTTP server on loopback (a thread of this process) that answers GET /health like MLflow's; yields its URI."""
    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def fresh_routes():
    tracking.route.cache_clear()  # route() is asked once per process
    yield
    tracking.route.cache_clear()


def _store(path: Path) -> str:
    return f"sqlite:///{path}"


def _experiment(store: str, name: str, artifact_location: str) -> str:
    import mlflow

    return mlflow.MlflowClient(tracking_uri=store).create_experiment(name, artifact_location=artifact_location)


def _cfg(**tracking_keys):
    return load_config(TINY, [f"tracking.{key}={value}" for key, value in tracking_keys.items()])


def test_links_open_the_training_view_of_the_ui_that_serves_the_store(tmp_path):
    info = {"tracking_uri": "http://127.0.0.1:5310/", "mlflow_run_id": "abc", "experiment_id": "7"}
    link = run_link(info, "pool/iter_0002")
    assert link["url"] == f"http://127.0.0.1:5310/#/experiments/7/runs/abc/artifactPath/pool/iter_0002?{TRAINING_VIEW}"
    assert link["experiment_url"] == f"http://127.0.0.1:5310/#/experiments/7?{TRAINING_VIEW}"
    assert (link["server"], link["ui_command"]) == ("http://127.0.0.1:5310", None)

    store = _store(tmp_path / "mlruns.db")  # no server: the address `mlflow ui` would serve, and that command
    link = run_link({**info, "tracking_uri": store})
    assert link["url"] == f"http://{UI_HOST}:{UI_PORT}/#/experiments/7/runs/abc?{TRAINING_VIEW}"
    assert link["ui_command"] == f"mlflow ui --backend-store-uri {store} --host {UI_HOST} --port {UI_PORT}"
    assert link["server"] is None and run_link(None) is None

    with health_server() as uri:  # served by make server's MLflow: its UI, no command
        record_server(store, uri)
        link = run_link({**info, "tracking_uri": store})
        assert (link["server"], link["ui_command"], link["tracking_uri"]) == (uri, None, store)
        assert link["url"] == f"{uri}/#/experiments/7/runs/abc?{TRAINING_VIEW}"


def test_a_store_is_served_only_by_the_server_its_record_names_while_that_answers(tmp_path):
    store, other = _store(tmp_path / "mlruns.db"), _store(tmp_path / "other.db")
    assert server_record(store) == tmp_path / f"mlruns.db{RECORD_SUFFIX}" and server_record("http://x") is None
    assert serving_server(store) is None  # no record
    with health_server() as uri:
        record_server(store, uri)
        assert serving_server(store) == uri
        assert serving_server(_store(tmp_path / "sub" / ".." / "mlruns.db")) == uri  # the same file
        assert serving_server(other) is None
        server_record(other).write_text(json.dumps({"store": store, "uri": uri}))  # a record of another store
        assert serving_server(other) is None
    assert serving_server(store) is None  # the server stopped; its record is left behind (killed)
    server_record(store).write_text("{not json")
    assert serving_server(store) is None


def test_a_new_run_uses_tracking_uri_else_mlflow_tracking_uri_else_mlruns_db_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.tracking_uri(_cfg()) == _store(tmp_path / "mlruns.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5310")
    assert tracking.tracking_uri(_cfg()) == "http://127.0.0.1:5310"
    assert tracking.tracking_uri(_cfg(uri="http://127.0.0.1:5999")) == "http://127.0.0.1:5999"
    # configs/pools.yaml names no port: it follows the server in use
    assert load_config(ROOT / "configs" / "pools.yaml").tracking.uri is None


def test_a_store_served_by_make_server_is_logged_to_through_it(tmp_path):
    store = _store(tmp_path / "mlruns.db")
    assert tracking.route(store) == store
    with health_server() as uri:
        record_server(store, uri)
        tracking.route.cache_clear()
        assert tracking.route(store) == uri


@pytest.mark.e2e  # no process, but a new MLflow sqlite store takes ~6 s to create (its schema migrations)
def test_runs_whose_artifacts_need_a_server_that_is_not_there_are_refused_in_one_line(tmp_path):
    import mlflow

    store = _store(tmp_path / "mlruns.db")
    _experiment(store, "solrl", "mlflow-artifacts:/1")  # made through `make server`'s MLflow, in the same file
    _experiment(store, "local", (tmp_path / "mlartifacts").as_uri())
    with pytest.raises(SolrlError) as new_run:
        check_tracking(_cfg(uri=store))
    message = str(new_run.value)
    assert "experiment 'solrl'" in message and "mlflow-artifacts:/1" in message and "\n" not in message
    assert f"`make server` in {tmp_path}" in message and "tracking.experiment" in message
    assert check_tracking(_cfg(uri=store, experiment="local")) == store  # artifacts in files: no server needed
    assert check_tracking(_cfg(uri=store, experiment="new")) == store

    # a resumed run: the MLflow run of run.json is checked, whatever the config says
    client = mlflow.MlflowClient(tracking_uri=store)
    run_id = client.create_run(client.get_experiment_by_name("solrl").experiment_id).info.run_id
    run = RunDir(tmp_path / "run")
    write_json_atomic(run.run_json, {"tracking_uri": store, "mlflow_run_id": run_id, "experiment_id": "1"})
    with pytest.raises(SolrlError, match=f"MLflow run {run_id} in {store} keeps its artifacts on an MLflow server"):
        check_tracking(_cfg(experiment="local"), run)
    with pytest.raises(SolrlError, match="keeps its artifacts on an MLflow server"):  # also where flows start it
        tracking.ensure_mlflow_run(run, _cfg())

    with health_server() as uri:  # the store's server runs again: both go through it
        record_server(store, uri)
        tracking.route.cache_clear()
        assert check_tracking(_cfg(uri=store)) == uri
        assert check_tracking(_cfg(), run) == uri


def test_mlflow_prints_no_run_links_on_stdout_once_connected(tmp_path, capsys, monkeypatch):
    from mlflow.tracking._tracking_service.client import TrackingServiceClient

    monkeypatch.setenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "")  # restored to what it was after the test
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # unsuppressed, it would ask port 9 and fail at once
    tracking.connect(_store(tmp_path / "mlruns.db"))
    # what MLflow runs after each run it ends: for a server store, "View run / View experiment" lines on stdout
    TrackingServiceClient("http://127.0.0.1:9")._log_url("abc")
    assert capsys.readouterr().out == ""


def test_few_params_are_logged_the_config_is_an_artifact():
    for config in (TINY, ROOT / "configs" / "demo.yaml", ROOT / "configs" / "pools.yaml"):
        cfg = load_config(config)
        params = tracking.run_params(cfg)
        assert params == {"family": cfg.family, "model.kind": cfg.model.kind, "iterations": str(cfg.iterations),
                          "train.optimizer.lr": str(cfg.train.optimizer.lr)}
    cfg = load_config(TINY, ["model.path=/models/flux"])
    assert tracking.run_params(cfg)["model.path"] == "/models/flux"


def test_deploy_fills_in_the_server_it_found_for_a_new_run_only(tmp_path):
    from flows.commands.deploy import _fill_in_tracking

    server = "http://127.0.0.1:5310"
    assert _fill_in_tracking(_cfg(), tmp_path / "run", server)
    assert not _fill_in_tracking(_cfg(), tmp_path / "run", _store(tmp_path / "mlruns.db"))  # the worker's own
    assert not _fill_in_tracking(_cfg(uri="http://127.0.0.1:5999"), tmp_path / "run", server)  # the config says
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.config_path.write_text("name: frozen\n")  # a run's store is decided when its config is frozen
    assert not _fill_in_tracking(_cfg(), run.root, server)
