"""The local Prefect server of `make server` (UI + API on 127.0.0.1):
`python -m solrl.flows.servers prefect PORT [--database FILE] [--host HOST [--insecure]]`.

`--host` binds another address; beyond loopback the server requires basic auth (PREFECT_SERVER_API_AUTH_STRING,
`user:password`; clients send PREFECT_API_AUTH_STRING) or refuses to start unless `--insecure`
(solrl_core/exposure.py).

`prefect server start --port` moves the API, but the UI asks the server's `/ui-settings` for its API URL, which
Prefect derives from PREFECT_API_URL or else PREFECT_SERVER_API_HOST/PORT (default 4200), not from `--port`. The
environment here names the port in all three places, so the UI calls the API it was served by.

`--database FILE` (what `make server` passes: .prefect/prefect.db of the checkout, Makefile PREFECT_DB) gives the
server a SQLite database of its own instead of Prefect's default, $PREFECT_HOME/prefect.db (~/.prefect/prefect.db),
which every temporary Prefect server uses (solrl's, flows/prefect_server.py, and Prefect's own). A database URL set
in the environment (PREFECT_SERVER_DATABASE_CONNECTION_URL or PREFECT_API_DATABASE_CONNECTION_URL, e.g. PostgreSQL)
wins over it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from solrl.flows.server_database import is_database_url, prefect_database_url, require_database
from solrl_core.redaction import redact

HOST = "127.0.0.1"


DATABASE_URL = "PREFECT_SERVER_DATABASE_CONNECTION_URL"
DATABASE_URL_SETTINGS = (DATABASE_URL, "PREFECT_API_DATABASE_CONNECTION_URL")  # Prefect reads either name


AUTH_SETTING = "PREFECT_SERVER_API_AUTH_STRING"  # the server's basic auth, `user:password`
WHAT_A_CALLER_CAN_DO = "run any deployment (arbitrary code on the workers) and read or delete every flow run"


def _reachable_as(host: str) -> str:
    """The address a browser on another machine calls for a server bound to `host` (a wildcard: this host's name)."""
    import socket

    from solrl_core.exposure import WILDCARDS

    return socket.gethostname() if host in WILDCARDS else host


def exposure_allowed(host: str, server: str, lets_a_caller: str, authenticated: bool, how: str,
                     insecure: bool) -> None:
    """`check_exposure` for a server about to start: its warning on stderr, or its refusal as the one-line error and
    exit 2 (the server does not start)."""
    from solrl.flows.user_errors import report, say
    from solrl_core.errors import SolrlError
    from solrl_core.exposure import check_exposure

    try:
        warning = check_exposure(host, server, lets_a_caller, authenticated, how, insecure)
    except SolrlError as exc:
        sys.exit(report(exc))
    if warning:
        say(f"solrl: {warning}")


def prefect_server_env(port: int, database: Path | str | None = None, environ=os.environ, host: str = HOST
                       ) -> dict[str, str]:
    """Settings for a Prefect server on `host`:`port` whose UI calls that same API; its database the SQLite file or
    PostgreSQL URL `database` (None: Prefect's default) unless `environ` names a database already."""
    env = {
        "PREFECT_SERVER_API_HOST": host,
        "PREFECT_SERVER_API_PORT": str(port),
        "PREFECT_UI_API_URL": f"http://{_reachable_as(host)}:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    if database is not None and not any(environ.get(name) for name in DATABASE_URL_SETTINGS):
        env[DATABASE_URL] = (prefect_database_url(str(database)) if is_database_url(str(database))
                             else f"sqlite+aiosqlite:///{Path(database).absolute()}")
    return env


def prefect_ui_command(port: int = 4200) -> str:
    """The shell line a user types to browse Prefect's runs on `port` (any port: the UI is told its API's address,
    see the module docstring), and the address to open."""
    return (f"PREFECT_UI_API_URL=http://{HOST}:{port}/api prefect server start --host {HOST} --port {port}  "
            f"(then open http://{HOST}:{port})")


def prefect_server_argv(port: int, host: str = HOST) -> list[str]:
    return [sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)]


def start_prefect(env: dict[str, str], port: int, log: Path, cwd: Path, timeout_s: float = 180,
                  database: Path | str | None = None):
    """`python -m solrl.flows.servers prefect PORT [--database FILE]` in a session of its own, returned once its API
    answers; None when it exits or does not answer within `timeout_s` (then see `log`)."""
    import subprocess
    import time
    import urllib.request

    argv = [sys.executable, "-m", "solrl.flows.servers", "prefect", str(port)]
    argv += ["--database", str(database)] if database is not None else []
    server = subprocess.Popen(argv, env=env, cwd=cwd, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"http://{HOST}:{port}/api/health", timeout=2)
            return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                return None
            time.sleep(1)


def _arguments(argv: list[str]):
    import argparse

    parser = argparse.ArgumentParser(prog="python -m solrl.flows.servers", description="The Prefect server of make server")
    parser.add_argument("server", choices=["prefect"])
    parser.add_argument("port", type=int)
    parser.add_argument("--database", help="its SQLite database file, or a PostgreSQL database's URL "
                        "(postgresql://USER@HOST:PORT/NAME; the password from PGPASSWORD or ~/.pgpass)")
    parser.add_argument("--host", default=HOST, help=f"the address to bind (default {HOST}); beyond loopback it "
                        f"needs {AUTH_SETTING}=user:password")
    parser.add_argument("--insecure", action="store_true", help="bind beyond loopback without authentication")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = _arguments(argv)
    exposure_allowed(args.host, "Prefect server", WHAT_A_CALLER_CAN_DO, bool(os.environ.get(AUTH_SETTING)),
                     f"set {AUTH_SETTING}=user:password (its clients then set PREFECT_API_AUTH_STRING)", args.insecure)
    env = prefect_server_env(args.port, args.database, host=args.host)
    if DATABASE_URL in env and is_database_url(args.database):
        require_database(args.database, "the Prefect server")  # one line now, not Prefect's traceback later
        print(f"Prefect database: {redact(args.database)}", file=sys.stderr, flush=True)
    elif DATABASE_URL in env:
        Path(args.database).absolute().parent.mkdir(parents=True, exist_ok=True)
        print(f"Prefect database: {Path(args.database).absolute()}", file=sys.stderr, flush=True)
    # exec: the caller's process id is the server's (make server stops it by that id)
    os.execve(sys.executable, prefect_server_argv(args.port, args.host), {**os.environ, **env})


if __name__ == "__main__":
    main(sys.argv[1:])
