"""MLflow's tracking without an MLflow process, for the tests of where solrl logs: an in-thread HTTP server that
answers GET /health as MLflow's server does, tracking routes asked afresh in each test, sqlite stores, and the tiny
config with tracking settings."""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from solrl.flows import tracking
from repo_paths import TINY
from solrl_core.config.loading import load_config


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
    """Autouse in the modules that import it: route() is asked once per process, so each test clears its answer."""
    tracking.route.cache_clear()
    yield
    tracking.route.cache_clear()


def sqlite_store(path: Path) -> str:
    return f"sqlite:///{path}"


def tracking_config(**tracking_keys):
    """The tiny config with `tracking.KEY=VALUE` for each keyword."""
    return load_config(TINY, [f"tracking.{key}={value}" for key, value in tracking_keys.items()])
