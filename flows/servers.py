"""The local Prefect server of `make server` (UI + API on 127.0.0.1):
`python -m flows.servers prefect PORT [--database FILE]`.

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

HOST = "127.0.0.1"


DATABASE_URL = "PREFECT_SERVER_DATABASE_CONNECTION_URL"
DATABASE_URL_SETTINGS = (DATABASE_URL, "PREFECT_API_DATABASE_CONNECTION_URL")  # Prefect reads either name


def prefect_server_env(port: int, database: Path | None = None, environ=os.environ) -> dict[str, str]:
    """Settings for a Prefect server on HOST:`port` whose UI calls that same API; its database the SQLite file
    `database` (None: Prefect's default) unless `environ` names a database already."""
    env = {
        "PREFECT_SERVER_API_HOST": HOST,
        "PREFECT_SERVER_API_PORT": str(port),
        "PREFECT_UI_API_URL": f"http://{HOST}:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    if database is not None and not any(environ.get(name) for name in DATABASE_URL_SETTINGS):
        env[DATABASE_URL] = f"sqlite+aiosqlite:///{Path(database).absolute()}"
    return env


def prefect_ui_command(port: int = 4200) -> str:
    """The shell line a user types to browse Prefect's runs on `port` (any port: the UI is told its API's address,
    see the module docstring), and the address to open."""
    return (f"PREFECT_UI_API_URL=http://{HOST}:{port}/api prefect server start --host {HOST} --port {port}  "
            f"(then open http://{HOST}:{port})")


def prefect_server_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "prefect", "server", "start", "--host", HOST, "--port", str(port)]


def start_prefect(env: dict[str, str], port: int, log: Path, cwd: Path, timeout_s: float = 180,
                  database: Path | None = None):
    """`python -m flows.servers prefect PORT [--database FILE]` in a session of its own, returned once its API
    answers; None when it exits or does not answer within `timeout_s` (then see `log`)."""
    import subprocess
    import time
    import urllib.request

    argv = [sys.executable, "-m", "flows.servers", "prefect", str(port)]
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


def main(argv: list[str]) -> None:
    usage = len(argv) in (2, 4) and argv[0] == "prefect" and argv[1].isdigit() and argv[2:3] in ([], ["--database"])
    if not usage:
        sys.exit("usage: python -m flows.servers prefect PORT [--database FILE]")
    port, database = int(argv[1]), (Path(argv[3]) if len(argv) == 4 else None)
    env = prefect_server_env(port, database)
    if DATABASE_URL in env:
        database.absolute().parent.mkdir(parents=True, exist_ok=True)
        print(f"Prefect database: {database.absolute()}", file=sys.stderr, flush=True)
    # exec: the caller's process id is the server's (make server stops it by that id)
    os.execve(sys.executable, prefect_server_argv(port), {**os.environ, **env})


if __name__ == "__main__":
    main(sys.argv[1:])
