"""The local Prefect server of `make server` (UI + API on 127.0.0.1): `python -m flows.servers prefect PORT`.

`prefect server start --port` moves the API, but the UI asks the server's `/ui-settings` for its API URL, which
Prefect derives from PREFECT_API_URL or else PREFECT_SERVER_API_HOST/PORT (default 4200), not from `--port`. The
environment here names the port in all three places, so the UI calls the API it was served by."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HOST = "127.0.0.1"


def prefect_server_env(port: int) -> dict[str, str]:
    """Settings for a Prefect server on HOST:`port` whose UI calls that same API."""
    return {
        "PREFECT_SERVER_API_HOST": HOST,
        "PREFECT_SERVER_API_PORT": str(port),
        "PREFECT_UI_API_URL": f"http://{HOST}:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }


def prefect_server_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "prefect", "server", "start", "--host", HOST, "--port", str(port)]


def start_prefect(env: dict[str, str], port: int, log: Path, cwd: Path, timeout_s: float = 180):
    """`python -m flows.servers prefect PORT` in a session of its own, returned once its API answers; None when it
    exits or does not answer within `timeout_s` (then see `log`)."""
    import subprocess
    import time
    import urllib.request

    server = subprocess.Popen([sys.executable, "-m", "flows.servers", "prefect", str(port)], env=env, cwd=cwd,
                              stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
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
    if len(argv) != 2 or argv[0] != "prefect" or not argv[1].isdigit():
        sys.exit("usage: python -m flows.servers prefect PORT")
    port = int(argv[1])
    # exec: the caller's process id is the server's (make server stops it by that id)
    os.execve(sys.executable, prefect_server_argv(port), {**os.environ, **prefect_server_env(port)})


if __name__ == "__main__":
    main(sys.argv[1:])
