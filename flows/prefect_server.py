"""The Prefect API of a command that runs flows: the configured server (PREFECT_API_URL), or a temporary one.

Without a configured server Prefect starts a temporary ("ephemeral") one itself when the first flow begins, and waits
for it (about 10 s, most of it importing the server). That one runs in the command's process group, so a terminal's
Ctrl-C stops it before the interrupted flow is recorded, and it outlives a command stopped by SIGTERM or SIGKILL.
`prefect_api()` starts the same server instead (uvicorn serving Prefect's API app, no UI, the temporary server's own
settings) as soon as the command knows a flow will run, so it boots while the command loads its model:

* in its own session: a terminal's Ctrl-C reaches the command only, which records the interruption and then stops it;
* under solrl_core.orphan_guard: it stops when the command dies, even by SIGKILL;
* bound to 127.0.0.1 on a free port; its database is Prefect's ($PREFECT_HOME/prefect.db), as for Prefect's own
  temporary server, not the one of `make server` (a file of the checkout: flows/servers.py);
* stopped when the command exits (atexit), after Prefect has sent its last logs and events: Prefect drains its queues
  at interpreter shutdown, before atexit handlers run; a server stopped earlier would leave them retrying for minutes.

A URL set in the environment is used as it is and nothing starts; one set in a Prefect profile is only known once
Prefect is imported, so the temporary server is then stopped unused.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator

from solrl.flows.servers import HOST
from solrl_core.errors import SolrlError
from solrl_core.orphan_guard import guarded

API_URL = "PREFECT_API_URL"
STARTUP_TIMEOUT = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"  # Prefect's setting for its temporary server
STOP_SECONDS = 10.0
# What Prefect sets for its own temporary server: no UI, only the services a temporary server runs.
TEMPORARY_SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}


def client_env() -> None:
    """Settings of every command that talks to Prefect, set before Prefect is imported."""
    # On 2 cores a fresh temporary Prefect server needs longer than the 20 s default to start.
    os.environ.setdefault(STARTUP_TIMEOUT, "120")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no network here; avoid telemetry errors
    os.environ.setdefault("DO_NOT_TRACK", "1")  # the client's side of the same (and no telemetry notice on a terminal)


def temporary_server_env() -> dict[str, str]:
    """The environment of a temporary server: this process's, with Prefect's temporary-server settings."""
    return {**os.environ, **TEMPORARY_SERVER_ENV}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class TemporaryServer:
    """A Prefect API server child of this process (see the module's docstring); `start` returns at once."""

    def __init__(self):
        self.process: subprocess.Popen | None = None
        self.port = 0
        self._log = tempfile.TemporaryFile()  # the server's output, shown when it fails to start

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/api"

    def start(self) -> None:
        if self.process is None:
            atexit.register(self.stop)
        self.port = _free_port()
        cmd = [sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app",
               "--host", HOST, "--port", str(self.port), "--log-level", "error", "--lifespan", "on"]
        self.process = subprocess.Popen(guarded(cmd), env=temporary_server_env(),
                                        stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def wait_ready(self) -> None:
        """Return once the API answers; start again on another port if the chosen one was taken meanwhile."""
        deadline = time.monotonic() + float(os.environ.get(STARTUP_TIMEOUT, "120"))
        attempts = 3
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2).close()
                return
            except OSError:
                pass
            if self.process.poll() is not None:
                attempts -= 1
                if attempts == 0:
                    raise SolrlError(f"the temporary Prefect server did not start (exit {self.process.returncode}): "
                                     f"{self._output()}; set {API_URL} to a running server (make server) instead")
                self.start()
            elif time.monotonic() > deadline:
                self.stop()
                raise SolrlError(f"the temporary Prefect server did not answer within {os.environ[STARTUP_TIMEOUT]} s;"
                                 f" raise {STARTUP_TIMEOUT} or set {API_URL} to a running server (make server)")
            time.sleep(0.1)

    def _output(self) -> str:
        self._log.seek(0)
        lines = self._log.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else "no output"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


class PrefectApi:
    """What `prefect_api()` yields: `ready()` wraps the flow runs."""

    def __init__(self, server: TemporaryServer | None):
        self.server = server

    @contextlib.contextmanager
    def ready(self) -> Iterator[str]:
        """Run flows inside this block: waits for the temporary server (if one was started and no profile names a
        server) and points Prefect, and the processes started inside, at it. Yields the API URL (None: the
        profile's).

        The flows a command runs in its own process send no heartbeat: the heartbeat automation watches runs of solrl
        deployments only (their processes set their own frequency, flows/deploy.py), and Prefect's heartbeat thread
        holds up the end of every flow run by up to a second (it sleeps in 1 s steps) - a second per iteration."""
        from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

        configured = PREFECT_API_URL.value()
        updates = {PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
        if self.server is None or configured:
            if self.server is not None:
                self.server.stop()  # a Prefect profile names a server: use that one
            with temporary_settings(updates=updates):
                yield configured
            return
        self.server.wait_ready()
        os.environ[API_URL] = self.server.url  # Dask workers and other Prefect children started inside
        with temporary_settings(updates={**updates, PREFECT_API_URL: self.server.url}):
            yield self.server.url


def prefect_api() -> PrefectApi:
    """Start a temporary Prefect server now, unless PREFECT_API_URL is set (`ready()` waits for it; it stops when the
    command exits). Call this once the command knows a flow will run, as early as possible."""
    client_env()
    server = None
    if not os.environ.get(API_URL):
        server = TemporaryServer()
        server.start()
    return PrefectApi(server)
