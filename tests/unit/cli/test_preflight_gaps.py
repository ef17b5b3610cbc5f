"""What `solrl train` refuses in one line before any work (flows/service_checks.py, solrl_core/run/storage.py
check_remote_access), and MLflow's sqlite store failing on a full disk while logging (flows/tracking.py); the
refusals through the CLI: tests/e2e/test_preflight_train.py."""

from __future__ import annotations

import os
import warnings

import pytest
from fsspec.implementations.memory import MemoryFileSystem

from solrl.flows import service_checks as preflight
from solrl.flows.service_checks import check_prefect_api, check_tracking_store, known_tracking_scheme
from solrl_core.errors import SolrlError
from solrl_core.run.rundir import RunDir
from solrl_core.run.storage import CREDENTIAL_SETTINGS, OTHER_STORE_SETTINGS, access_failure, check_remote_access



def _one_line(call) -> str:
    with pytest.raises(SolrlError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    return message


# ---- PREFECT_API_URL ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["notaurl", "ftp://host/api", "http://", "127.0.0.1:4200/api"])
def test_a_prefect_api_url_that_is_not_http_is_refused(monkeypatch, url):
    monkeypatch.setenv("PREFECT_API_URL", url)
    message = _one_line(check_prefect_api)
    assert f"PREFECT_API_URL={url} is not an http(s) URL" in message and "unset it" in message


# ---- tracking.uri ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("uri", ["foo://x", "s4://bucket/mlruns", "mlflow-artifacts://host/x"])
def test_a_tracking_uri_mlflow_has_no_store_for_is_refused(uri):
    message = _one_line(lambda: check_tracking_store(uri, "tracking.uri"))
    scheme = uri.split(":")[0]
    assert f"tracking.uri = {uri}: MLflow has no tracking store for '{scheme}:' URIs" in message
    assert "sqlite:///FILE" in message


@pytest.mark.parametrize("uri", ["postgresql://user@db.example/mlflow", "postgresql+psycopg2://u@h/db",
                                 "mysql+pymysql://h/db", "mssql://h/db", "databricks", "databricks://profile",
                                 "http://h:5000", "sqlite:///x.db", "file:///tmp/mlruns", "relative/mlruns",
                                 "/abs/mlruns", "C:/mlruns"])
def test_the_stores_mlflow_accepts_are_known(uri):
    assert known_tracking_scheme(uri)


def test_a_database_store_with_its_driver_is_left_to_mlflow(monkeypatch):
    import sys
    import types

    monkeypatch.setitem(sys.modules, "psycopg2", types.ModuleType("psycopg2"))  # the postgres extra, installed
    check_tracking_store("postgresql+psycopg2://user@db.invalid/mlflow")  # no connection attempted here


@pytest.mark.parametrize("store", ["{}/mlruns", "file://{}/mlruns"])
def test_a_folder_store_needs_mlflows_switch(tmp_path, monkeypatch, store):
    """MLflow 3 raises a traceback at the first use of a folder store unless MLFLOW_ALLOW_FILE_STORE is true."""
    from mlflow.store.tracking.file_store import FileStore

    uri = store.format(tmp_path)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(Exception, match="MLFLOW_ALLOW_FILE_STORE=true"):
        FileStore(str(tmp_path / "mlruns"))  # what MLflow itself does without the switch
    message = _one_line(lambda: check_tracking_store(uri))
    assert message == (f"tracking.uri = {uri}: MLflow opens a folder store only with MLFLOW_ALLOW_FILE_STORE=true; "
                       "set tracking.uri to a database, e.g. sqlite:///mlruns.db, or export MLFLOW_ALLOW_FILE_STORE=true")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    check_tracking_store(uri)


@pytest.mark.parametrize("store", ["sqlite:///{}/mlruns.db", "{}/mlruns", "file://{}/mlruns"])
def test_a_store_on_a_full_disk_is_refused(tmp_path, monkeypatch, store):
    uri = store.format(tmp_path)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # folder stores: MLflow 3 opens them only with it
    check_tracking_store(uri)  # room enough
    real = preflight.shutil.disk_usage

    def full(path):
        return real(path)._replace(free=4096)

    monkeypatch.setattr(preflight.shutil, "disk_usage", full)
    message = _one_line(lambda: check_tracking_store(uri))
    assert f"tracking.uri = {uri}: the disk of {tmp_path} is full (4096 bytes free)" in message


# ---- a run directory on an object store -----------------------------------------------------------------------------
class RefusingFS(MemoryFileSystem):
    """An object store (fsspec) whose every request fails with `error`, as its client raises it."""

    protocol = ("refusing",)
    error: BaseException = RuntimeError("set by the test")

    def info(self, path, **kwargs):
        raise self.error


@pytest.fixture
def refusing(monkeypatch):
    """RefusingFS as protocol refusing://, for this test only; its `error` set by the test."""
    from fsspec.registry import _registry  # `fsspec.registry` is its read-only view

    monkeypatch.setitem(_registry, "refusing", RefusingFS)
    monkeypatch.setattr(RefusingFS, "error", RefusingFS.error)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "UPath 'refusing' filesystem not explicitly implemented")
        yield RefusingFS


def _no_credentials():
    from botocore.exceptions import NoCredentialsError

    return NoCredentialsError()


@pytest.mark.parametrize("error, why", [
    (_no_credentials(), "no credentials for the store (NoCredentialsError: Unable to locate credentials)"),
    (PermissionError("Access Denied"), "the store refused the credentials or the access (Access Denied)"),
    (ConnectionRefusedError("connection refused"), "the store does not answer (connection refused)"),
])
def test_a_run_dir_the_store_refuses_is_one_line_naming_what_to_set(refusing, error, why):
    refusing.error = error
    run = RunDir("refusing://bucket/run")
    message = _one_line(run.check_writable)
    assert message == f"--run-dir refusing://bucket/run: {why}; set {OTHER_STORE_SETTINGS}"


def test_a_wrapped_credentials_error_is_found_and_a_bug_keeps_its_traceback(refusing):
    try:
        try:
            raise _no_credentials()
        except Exception as exc:
            raise OSError("request failed") from exc
    except OSError as wrapped:
        assert access_failure(wrapped).startswith("no credentials")
    refusing.error = ValueError("a bug in the client")
    with pytest.raises(ValueError, match="a bug in the client"):
        check_remote_access("refusing://bucket/run")


def test_an_absent_or_local_run_dir_passes(tmp_path):
    check_remote_access("memory://bucket/new-run")  # absent: a new run
    check_remote_access(tmp_path / "run")


def test_s3_names_the_aws_variables():
    assert "AWS_ACCESS_KEY_ID" in CREDENTIAL_SETTINGS["s3"] and "AWS_ENDPOINT_URL" in CREDENTIAL_SETTINGS["s3"]


def test_s3_without_credentials_is_one_line(monkeypatch):
    """s3fs and botocore as they are, no credentials anywhere: refused by botocore before any connection."""
    import s3fs

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance metadata lookup
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # never reached
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        message = _one_line(lambda: check_remote_access("s3://solrl-no-such-bucket/run"))
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert message.startswith("--run-dir s3://solrl-no-such-bucket/run: no credentials for the store")
    assert message.endswith(f"set {CREDENTIAL_SETTINGS['s3']}")


# ---- MLflow's sqlite store on a full disk, while logging ---------------------------------------------------------
def test_a_full_disk_under_the_sqlite_store_while_logging_is_one_line(tmp_path, monkeypatch):
    """SQLite's own SQLITE_FULL ("database or disk is full"), raised inside MLflow's store: the page count of every
    connection is capped at the database's size, so the next write that needs a page fails as on a full disk."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from solrl.flows.tracking import TrackingFailed, connect, tracking_errors

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    monkeypatch.chdir(tmp_path)
    mlflow = connect(uri)
    client = mlflow.MlflowClient()
    run_id = client.create_run(client.create_experiment("e")).info.run_id
    pages = {"cap": None}

    def cap(dbapi_connection, _record):
        if pages["cap"] is not None:
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA max_page_count = {pages['cap']}")
            cursor.close()

    event.listen(Engine, "connect", cap)
    try:
        import sqlite3

        with sqlite3.connect(tmp_path / "mlruns.db") as db:
            pages["cap"] = db.execute("PRAGMA page_count").fetchone()[0]
        client._tracking_client.store.engine.dispose()  # new connections: capped
        with pytest.raises(TrackingFailed) as info:
            with tracking_errors(uri, "iteration 0"):
                for step in range(2000):  # each a row: the free pages run out
                    client.log_metric(run_id, "x" * 200 + str(step), 1.0, step=step)
    finally:
        event.remove(Engine, "connect", cap)
    message = str(info.value)
    assert "\n" not in message and "database error: database or disk is full" in message, message
    assert "free on the disk of" in message and "free some space there or use another tracking.uri" in message
    assert f"MLflow at {uri} failed while logging iteration 0" in message
