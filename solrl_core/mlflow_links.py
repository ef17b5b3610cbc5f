"""Where a run's MLflow run can be seen: its tracking store, the MLflow server that serves that store, and the UI's
addresses of the run and its experiment.

Addresses open MLflow's training view: MLflow 3.17's UI opens an experiment in its GenAI view unless the address asks
for the other one (it ignores the experiment's `mlflow.experimentKind` tag), so each carries TRAINING_VIEW as its
query, after the page's path (`#/experiments/1/runs/abc/artifactPath/pool?workflowType=machine_learning`).

A sqlite store is *served* while `make server` (`python -m solrl.flows.servers mlflow`) runs an MLflow server on it: that
process keeps a record beside the database file (`<file>.server.json`: the store and the server's URI) from the
moment the server answers until it stops. A command whose tracking URI is that file then talks to the server
(flows/tracking.py): one writer, and artifacts go where the server keeps them (`mlflow-artifacts:` locations, which
only a server can reach). Links point at the server's UI instead of suggesting an `mlflow ui` of one's own.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

UI_HOST, UI_PORT = "127.0.0.1", 5000  # where `mlflow ui` is suggested for a store that no server serves
TRAINING_VIEW = "workflowType=machine_learning"
HEALTH_TIMEOUT = 5.0  # seconds per health request
RECORD_SUFFIX = ".server.json"
SQLITE = "sqlite:///"


def health_failure(url: str, headers: dict[str, str] | None = None) -> str | None:
    """Why GET `url` did not answer 2xx within HEALTH_TIMEOUT seconds; None when it did. A user and password in
    `url` go as basic authentication (never shown: the reason names the URL redacted)."""
    from solrl_core.redaction import basic_auth, redact

    plain, auth = basic_auth(url)
    request = urllib.request.Request(plain, headers={**auth, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=HEALTH_TIMEOUT):
            return None
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} from {redact(url)}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return "no answer within {:g} s".format(HEALTH_TIMEOUT) if "timed out" in str(reason) else str(reason)


def is_server(uri: str) -> bool:
    """Whether tracking URI `uri` names an MLflow server (http or https)."""
    return urlparse(uri).scheme in ("http", "https")


def sqlite_file(uri: str) -> Path | None:
    """The database file of a sqlite tracking URI, absolute and normalized; None for other stores and in-memory
    databases."""
    if not uri.startswith(SQLITE):
        return None
    path = uri[len(SQLITE):]
    return None if not path or path == ":memory:" else Path(os.path.abspath(path))


def server_record(store: str) -> Path | None:
    """Where the MLflow server of `make server` records that it serves sqlite store `store` (None: not sqlite)."""
    database = sqlite_file(store)
    return None if database is None else database.with_name(database.name + RECORD_SUFFIX)


def record_server(store: str, uri: str) -> Path:
    """Record that the MLflow server at `uri` serves sqlite store `store`; return the record's path."""
    record = server_record(store)
    tmp = record.with_name(record.name + ".tmp")
    tmp.write_text(json.dumps({"store": store, "uri": uri}))
    tmp.replace(record)
    return record


def serving_server(store: str) -> str | None:
    """The URI of the MLflow server that serves `store` and answers now (make server's record), else None."""
    record = server_record(store)
    if record is None or not record.is_file():
        return None
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    uri = data.get("uri") if isinstance(data, dict) else None
    if not isinstance(uri, str) or sqlite_file(str(data.get("store"))) != sqlite_file(store):
        return None
    return None if health_failure(uri.rstrip("/") + "/health") else uri


def ui_address(uri: str) -> tuple[str, str | None]:
    """(the UI's base address for tracking URI `uri`, the `mlflow ui` command that serves it or None when a server
    does): an MLflow server is its own UI; a store served by `make server` has that server's UI; any other store
    (sqlite, files, a database) has none running, and `mlflow ui` on UI_HOST:UI_PORT would serve it."""
    server = uri if is_server(uri) else serving_server(uri)
    if server is not None:
        return server.rstrip("/"), None
    return f"http://{UI_HOST}:{UI_PORT}", f"mlflow ui --backend-store-uri {uri} --host {UI_HOST} --port {UI_PORT}"


def page(base: str, experiment_id: str, run_id: str | None = None, artifact_path: str | None = None) -> str:
    """The UI address (training view) of an experiment, one of its runs, or an artifact path of that run."""
    path = f"/#/experiments/{experiment_id}"
    if run_id is not None:
        path += f"/runs/{run_id}" + (f"/artifactPath/{artifact_path}" if artifact_path else "")
    return f"{base}{path}?{TRAINING_VIEW}"


def run_link(info: dict | None, artifact_path: str | None = None) -> dict | None:
    """Where the MLflow run of a run directory (`info`: its run.json; None before it exists) is: tracking_uri,
    run_id, experiment_id, the UI addresses of the run (`url`, at `artifact_path` when given) and of its experiment
    (`experiment_url`), `server` (the MLflow server whose UI that is, None when none runs) and `ui_command` (the
    `mlflow ui` command that serves those addresses when no server does, else None)."""
    if info is None:
        return None
    uri, experiment = info["tracking_uri"], str(info.get("experiment_id", "0"))
    base, command = ui_address(uri)
    return {"tracking_uri": uri, "run_id": info["mlflow_run_id"], "experiment_id": experiment,
            "url": page(base, experiment, info["mlflow_run_id"], artifact_path),
            "experiment_url": page(base, experiment), "server": None if command else base, "ui_command": command}
