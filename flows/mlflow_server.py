"""The MLflow server of `make server` (UI + tracking on 127.0.0.1, artifacts proxied):
`python -m flows.mlflow_server PORT STORE ARTIFACTS`.

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
import signal
import subprocess
import sys
import time

from flows.servers import HOST
from solrl_core.mlflow_links import health_failure, record_server, server_record
from solrl_core.orphan_guard import guarded

STOP_SECONDS = 20.0


def serving_uri(record) -> str | None:
    """The server URI a record names (None when it is gone or unreadable)."""
    try:
        return json.loads(record.read_text()).get("uri")
    except (OSError, ValueError, AttributeError):
        return None


def mlflow_server_argv(port: int, store: str, artifacts: str) -> list[str]:
    return [sys.executable, "-m", "mlflow", "server", "--host", HOST, "--port", str(port), "--workers", "1",
            "--backend-store-uri", store, "--artifacts-destination", artifacts]


def serve(port: int, store: str, artifacts: str) -> int:
    """Run the server until it exits or this process is told to stop; its exit code."""
    server = subprocess.Popen(guarded(mlflow_server_argv(port, store, artifacts)))
    uri = f"http://{HOST}:{port}"

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
    if len(argv) != 3 or not argv[0].isdigit():
        sys.exit("usage: python -m flows.mlflow_server PORT STORE ARTIFACTS")
    sys.exit(serve(int(argv[0]), argv[1], argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
