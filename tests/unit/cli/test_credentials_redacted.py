"""Credentials inside URLs (#52): never in an error line nor in what a run logs to MLflow; a URL with a user and
password reaches its host (the user part is not taken for the host); a database store without its driver is one line
naming the extra."""

from __future__ import annotations

import base64
import http.server
import threading

import pytest

from solrl_core.errors import SolrlError
from solrl_core.redaction import basic_auth, redact, redact_text, redact_tree

SECRET = "s3cr3t-7f2a9c"  # planted once per place a credential can come from; must never come back


@pytest.mark.parametrize("url, shown", [
    (f"postgresql://bob:{SECRET}@db.example:5432/ml", "postgresql://***@db.example:5432/ml"),
    (f"https://bob:{SECRET}@mlflow.example/", "https://***@mlflow.example/"),
    (f"http://{SECRET}@127.0.0.1:4200/api", "http://***@127.0.0.1:4200/api"),
    (f"https://s3.example/b/k?X-Amz-Signature={SECRET}&part=1", "https://s3.example/b/k?X-Amz-Signature=***&part=1"),
    (f"https://h/reward?api_key={SECRET}", "https://h/reward?api_key=***"),
    ("sqlite:///tmp/mlruns.db", "sqlite:///tmp/mlruns.db"),  # nothing secret: unchanged
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
])
def test_a_url_loses_its_user_information_and_secret_query_values(url, shown):
    assert redact(url) == shown
    assert SECRET not in redact_text(f"tracking.uri = {url}: no server answers")


def test_an_error_that_quotes_a_url_with_a_password_does_not_carry_it():
    error = SolrlError(f"PREFECT_API_URL=http://admin:{SECRET}@10.0.0.5:4200/api: no Prefect server answers")
    assert SECRET not in str(error) and "http://***@10.0.0.5:4200/api" in str(error)


def test_the_config_logged_to_mlflow_holds_no_credential():
    from solrl.flows.tracking import run_params
    from solrl_core.config.loading import load_config
    from repo_paths import TINY

    cfg = load_config(TINY, [f"tracking.uri=postgresql://bob:{SECRET}@db.example/ml"])
    assert SECRET in cfg.tracking.uri  # used as written ...
    assert SECRET not in repr(redact_tree(cfg.model_dump(mode="json")))  # ... logged without it
    assert all(SECRET not in value for value in run_params(cfg).values())


def test_a_url_with_a_user_and_password_reaches_its_host_with_basic_auth():
    from solrl_core.mlflow_links import health_failure

    seen = []

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the handler's name
            seen.append(self.headers.get("Authorization"))
            self.send_response(200 if self.headers.get("Authorization") else 401)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert health_failure(f"http://bob:{SECRET}@127.0.0.1:{port}/health") is None
        expected = "Basic " + base64.b64encode(f"bob:{SECRET}".encode()).decode()
        assert seen == [expected]
        failure = health_failure(f"http://127.0.0.1:{port}/health?token={SECRET}")  # no user: 401, named redacted
        assert failure is not None and "401" in failure and SECRET not in failure
    finally:
        server.shutdown()
    assert basic_auth("http://127.0.0.1:5000/") == ("http://127.0.0.1:5000/", {})


def test_a_database_store_without_its_driver_names_the_extra(monkeypatch):
    import importlib.util

    from solrl.flows.service_checks import check_tracking_store

    if importlib.util.find_spec("psycopg2") is not None:  # the postgres extra is installed: make it missing
        import sys

        monkeypatch.setitem(sys.modules, "psycopg2", None)
    with pytest.raises(SolrlError) as refused:
        check_tracking_store(f"postgresql://bob:{SECRET}@db.example/ml")
    message = str(refused.value)
    assert "psycopg2" in message and "solrl[postgres]" in message and SECRET not in message
    assert message.startswith("tracking.uri = postgresql://***@db.example/ml")


def test_a_run_directory_keeps_the_store_redacted_and_finds_its_credentials_again(tmp_path, monkeypatch):
    """The frozen config (and its fingerprint) hold the store without its password; the same config resumes the run
    (credentials are not part of it); a later command finds them in MLFLOW_TRACKING_URI, or says where to give them."""
    import solrl_core.credentials as credentials
    from solrl.flows.tracking import tracking_uri
    from repo_paths import TINY
    from solrl_core.config.loading import load_config
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_config import load_run_config, prepare_run

    monkeypatch.setattr(credentials, "_KNOWN", {})  # a fresh process
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    store = f"postgresql://bob:{SECRET}@db.example/ml"
    run = RunDir(tmp_path / "run")
    cfg = load_config(TINY, [f"tracking.uri={store}"])
    prepare_run(run, cfg)
    assert not [p for p in run.root.rglob("*") if p.is_file() and SECRET in p.read_text(errors="replace")]
    prepare_run(run, cfg)  # the same config: no "different config"
    frozen = load_run_config(run)
    assert frozen.tracking.uri == "postgresql://***@db.example/ml"
    with pytest.raises(SolrlError, match="export MLFLOW_TRACKING_URI=<the same URI with them>") as refused:
        tracking_uri(frozen)
    assert SECRET not in str(refused.value)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    assert tracking_uri(frozen) == store
