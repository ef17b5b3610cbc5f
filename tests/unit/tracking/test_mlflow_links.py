"""Where solrl logs to and what it links (no process started: an in-thread HTTP server stands in for MLflow's health
endpoint): the store of a new run, the MLflow server of `make server` serving a sqlite store (its record), links in
MLflow's training view (a run's and its pool's), the few params MLflow's image card shows, and `solrl deploy` filling
in the server it found (runs refused for want of a server: tests/e2e/test_mlflow_links_store.py)."""

from __future__ import annotations

import json


from mlflow_stand_in import fresh_routes  # noqa: F401 - autouse: each test asks tracking.route afresh
from mlflow_stand_in import health_server, sqlite_store, tracking_config
from repo_paths import ROOT, TINY
from solrl.flows import tracking
from solrl_core.config.loading import load_config
from solrl_core.mlflow_links import (RECORD_SUFFIX, TRAINING_VIEW, UI_HOST, UI_PORT, record_server, run_link,
                                     server_record, serving_server)
from solrl_core.inspect import mlflow_pool_link as pool_link
from solrl_core.run.rundir import RunDir, write_json_atomic


def test_links_open_the_training_view_of_the_ui_that_serves_the_store(tmp_path):
    info = {"tracking_uri": "http://127.0.0.1:5310/", "mlflow_run_id": "abc", "experiment_id": "7"}
    link = run_link(info, "pool/iter_0002")
    assert link["url"] == f"http://127.0.0.1:5310/#/experiments/7/runs/abc/artifactPath/pool/iter_0002?{TRAINING_VIEW}"
    assert link["experiment_url"] == f"http://127.0.0.1:5310/#/experiments/7?{TRAINING_VIEW}"
    assert (link["server"], link["ui_command"]) == ("http://127.0.0.1:5310", None)

    store = sqlite_store(tmp_path / "mlruns.db")  # no server: the address `mlflow ui` would serve, and that command
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
    store, other = sqlite_store(tmp_path / "mlruns.db"), sqlite_store(tmp_path / "other.db")
    assert server_record(store) == tmp_path / f"mlruns.db{RECORD_SUFFIX}" and server_record("http://x") is None
    assert serving_server(store) is None  # no record
    with health_server() as uri:
        record_server(store, uri)
        assert serving_server(store) == uri
        assert serving_server(sqlite_store(tmp_path / "sub" / ".." / "mlruns.db")) == uri  # the same file
        assert serving_server(other) is None
        server_record(other).write_text(json.dumps({"store": store, "uri": uri}))  # a record of another store
        assert serving_server(other) is None
    assert serving_server(store) is None  # the server stopped; its record is left behind (killed)
    server_record(store).write_text("{not json")
    assert serving_server(store) is None


def test_a_new_run_uses_tracking_uri_else_mlflow_tracking_uri_else_mlruns_db_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.tracking_uri(tracking_config()) == sqlite_store(tmp_path / "mlruns.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5310")
    assert tracking.tracking_uri(tracking_config()) == "http://127.0.0.1:5310"
    assert tracking.tracking_uri(tracking_config(uri="http://127.0.0.1:5999")) == "http://127.0.0.1:5999"
    # configs/pools.yaml names no port: it follows the server in use
    assert load_config(ROOT / "configs" / "pools.yaml").tracking.uri is None


def test_a_store_served_by_make_server_is_logged_to_through_it(tmp_path):
    store = sqlite_store(tmp_path / "mlruns.db")
    assert tracking.route(store) == store
    with health_server() as uri:
        record_server(store, uri)
        tracking.route.cache_clear()
        assert tracking.route(store) == uri


def test_mlflow_prints_no_run_links_on_stdout_once_connected(tmp_path, capsys, monkeypatch):
    from mlflow.tracking._tracking_service.client import TrackingServiceClient

    monkeypatch.setenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "")  # restored to what it was after the test
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # unsuppressed, it would ask port 9 and fail at once
    tracking.connect(sqlite_store(tmp_path / "mlruns.db"))
    # what MLflow runs after each run it ends: for a server store, "View run / View experiment" lines on stdout
    TrackingServiceClient("http://127.0.0.1:9")._log_url("abc")
    assert capsys.readouterr().out == ""


def test_a_store_connected_to_does_not_become_the_next_new_runs_store(tmp_path, monkeypatch):
    """MLflow exports the URI it is set to as MLFLOW_TRACKING_URI; connect puts the user's variable back, so a new run
    later in the same process (a sweep, a matrix) still goes where tracking.uri / the variable / the working directory
    says, and the store's URI (credentials and all) does not reach the children's environment."""
    import os

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    tracking.connect(sqlite_store(tmp_path / "a" / "mlruns.db"))
    assert "MLFLOW_TRACKING_URI" not in os.environ
    monkeypatch.chdir(tmp_path / "b")
    assert tracking.tracking_uri(load_config(TINY)) == sqlite_store(tmp_path / "b" / "mlruns.db")

    monkeypatch.setenv("MLFLOW_TRACKING_URI", sqlite_store(tmp_path / "b" / "team.db"))
    tracking.connect(sqlite_store(tmp_path / "a" / "mlruns.db"))
    assert os.environ["MLFLOW_TRACKING_URI"] == sqlite_store(tmp_path / "b" / "team.db")


def test_few_params_are_logged_the_config_is_an_artifact():
    for config in (TINY, ROOT / "configs" / "demo.yaml", ROOT / "configs" / "pools.yaml"):
        cfg = load_config(config)
        params = tracking.run_params(cfg)
        assert params == {"family": cfg.family, "model.kind": cfg.model.kind, "iterations": str(cfg.iterations),
                          "train.optimizer.lr": str(cfg.train.optimizer.lr)}
    cfg = load_config(TINY, ["model.path=/models/flux"])
    assert tracking.run_params(cfg)["model.path"] == "/models/flux"


def test_deploy_fills_in_the_server_it_found_for_a_new_run_only(tmp_path):
    from solrl.cli.commands.deploy import _fill_in_tracking

    server = "http://127.0.0.1:5310"
    assert _fill_in_tracking(tracking_config(), tmp_path / "run", server)
    assert not _fill_in_tracking(tracking_config(), tmp_path / "run", sqlite_store(tmp_path / "mlruns.db"))  # the worker's own
    assert not _fill_in_tracking(tracking_config(uri="http://127.0.0.1:5999"), tmp_path / "run", server)  # the config says
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.config_path.write_text("name: frozen\n")  # a run's store is decided when its config is frozen
    assert not _fill_in_tracking(tracking_config(), run.root, server)


def test_link_to_a_tracking_server_opens_its_ui(tmp_path):
    run = RunDir(tmp_path)
    assert pool_link(run, 0) is None
    write_json_atomic(run.run_json, {"tracking_uri": "http://127.0.0.1:5001/", "mlflow_run_id": "abc",
                                     "experiment_id": "7"})
    link = pool_link(run, 2)
    assert link["url"] == f"http://127.0.0.1:5001/#/experiments/7/runs/abc/artifactPath/pool/iter_0002?{TRAINING_VIEW}"
    assert link["ui_command"] is None and link["logged"] is False
