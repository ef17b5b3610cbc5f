"""The MLflow server of `make server` (UI + tracking on 127.0.0.1, artifacts proxied):
`python -m solrl.flows.mlflow_server PORT STORE ARTIFACTS [--host HOST [--insecure]]`.

With MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD set (what MLflow's clients send), the server is MLflow's
basic-auth app (`mlflow server --app-name basic-auth`, the `solrl[server-auth]` extra): that user is its admin, the
password passed in the environment only (MLFLOW_AUTH_ADMIN_PASSWORD, never in a file), its users kept in
AUTH_DATABASE beside ARTIFACTS. Beyond loopback (`--host`) the server requires it, or refuses to start unless
`--insecure` (solrl_core/exposure.py).

Runs `mlflow server` on STORE (a backend store URI) with its artifacts kept in the folder ARTIFACTS, and, while the
server answers, records beside a sqlite STORE that this server serves it (solrl_core/mlflow_links.py): a `solrl`
command whose tracking URI is that file (the default ./mlruns.db of the same folder) then logs through this server,
whose experiments keep their artifacts where only a server reaches them (`mlflow-artifacts:`). The record goes when
the server stops (SIGTERM or SIGINT here: the server is stopped first; the server exiting by itself). If this process
is killed outright, the server stops with it (solrl_core.orphan_guard) and the stale record names a server that no
longer answers, which solrl ignores.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from solrl.flows.server_database import is_database_url, require_database
from solrl.flows.servers import HOST, exposure_allowed
from solrl_core.exposure import WILDCARDS, local_address
from solrl_core.mlflow_links import health_failure, record_server, server_record
from solrl_core.orphan_guard import guarded

STOP_SECONDS = 20.0


def serving_uri(record) -> str | None:
    """The server URI a record names (None when it is gone or unreadable)."""
    try:
        return json.loads(record.read_text()).get("uri")
    except (OSError, ValueError, AttributeError):
        return None


USER, PASSWORD = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"
AUTH_DATABASE = "mlflow-auth.db"  # the basic-auth app's users and permissions, beside the artifacts folder
WHAT_A_CALLER_CAN_DO = "read, change and delete every experiment, run and artifact"


def authenticated(environ=os.environ) -> bool:
    return bool(environ.get(USER) and environ.get(PASSWORD))


def allowed_hosts(host: str, port: int) -> list[str]:
    """`--allowed-hosts` for a server bound to one address other than 127.0.0.1: that address and this machine's
    names, with and without the port (MLflow's default, localhost and private addresses, refuses e.g. 127.0.0.2 or
    a public address as Host header: its DNS-rebinding guard). None of it for 127.0.0.1 or a wildcard bind."""
    import socket

    if host == HOST or host in WILDCARDS:
        return []
    names = dict.fromkeys([host, socket.gethostname(), "localhost", HOST])
    return ["--allowed-hosts", ",".join(f"{n}{p}" for n in names for p in ("", f":{port}"))]


def mlflow_server_argv(port: int, store: str, artifacts: str, host: str = HOST, auth: bool = False) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server", "--host", host, "--port", str(port), "--workers", "1",
            "--backend-store-uri", store, "--artifacts-destination", artifacts, *allowed_hosts(host, port),
            *(["--app-name", "basic-auth"] if auth else [])]


def auth_env(artifacts: str, folder: Path, environ=os.environ) -> dict[str, str]:
    """The basic-auth app's environment: a config file in `folder` (no secret in it) naming the admin user and the
    users' database; the admin's password and the session secret only in the environment."""
    database = Path(artifacts).absolute().parent / AUTH_DATABASE
    config = folder / "basic_auth.ini"
    config.write_text("[mlflow]\ndefault_permission = READ\n"
                      f"database_uri = sqlite:///{database}\nadmin_username = {environ[USER]}\n"
                      "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
    return {"MLFLOW_AUTH_CONFIG_PATH": str(config), "MLFLOW_AUTH_ADMIN_PASSWORD": environ[PASSWORD],
            "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(32)}


def serve(port: int, store: str, artifacts: str, host: str = HOST) -> int:
    """Run the server until it exits or this process is told to stop; its exit code."""
    auth = authenticated()
    with tempfile.TemporaryDirectory(prefix="solrl-mlflow-auth-") as folder:
        env = {**os.environ, **auth_env(artifacts, Path(folder))} if auth else None
        server = subprocess.Popen(guarded(mlflow_server_argv(port, store, artifacts, host, auth)), env=env)
        return _watch(server, port, store, host)


def _watch(server: subprocess.Popen, port: int, store: str, host: str) -> int:
    uri = f"http://{local_address(host)}:{port}"

    def stop(*_) -> None:
        raise SystemExit(0)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    record = None
    try:
        while health_failure(f"{uri}/health") and server.poll() is None:
            time.sleep(0.5)
        if server.poll() is None and server_record(store) is not None:
            record = record_server(store, uri)
        return server.wait()
    finally:
        if record is not None and serving_uri(record) == uri:  # not one a later server on this store wrote
            record.unlink(missing_ok=True)
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                server.kill()


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m solrl.flows.mlflow_server", description="The MLflow server of make "
                                     "server")
    parser.add_argument("port", type=int)
    parser.add_argument("store", help="the backend store URI")
    parser.add_argument("artifacts", help="the folder of the artifacts")
    parser.add_argument("--host", default=HOST, help=f"the address to bind (default {HOST}); beyond loopback it "
                        f"needs {USER} and {PASSWORD}")
    parser.add_argument("--insecure", action="store_true", help="bind beyond loopback without authentication")
    args = parser.parse_args(argv)
    exposure_allowed(args.host, "MLflow server", WHAT_A_CALLER_CAN_DO, authenticated(),
                     f"set {USER} and {PASSWORD} (its basic-auth app; the same two variables let solrl and MLflow's "
                     "clients in)", args.insecure)
    if is_database_url(args.store):
        require_database(args.store, "the MLflow server")  # one line now, not MLflow's traceback later
    sys.exit(serve(args.port, args.store, args.artifacts, args.host))


if __name__ == "__main__":
    main(sys.argv[1:])
