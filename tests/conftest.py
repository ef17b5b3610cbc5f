"""Shared fixtures: a real Prefect server on 127.0.0.1 for the whole session, and a runner for the `solrl` CLI."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from flows.servers import start_prefect

# Before torch loads: OpenMP threads that spin while waiting stall badly on a shared 2-core machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "configs" / "tiny.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def session_env(tmp_path_factory) -> dict[str, str]:
    """Environment for CLI subprocesses: private PREFECT_HOME, a Prefect server on loopback, quiet logs."""
    base = tmp_path_factory.mktemp("env")
    env = {
        **os.environ,
        "PREFECT_HOME": str(base / "prefect"),
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "MLFLOW_TRACKING_URI": "",
    }
    env.pop("PREFECT_API_URL", None)
    port = free_port()
    server = start_prefect_server(env, port, base / "prefect-server.log")
    env["PREFECT_API_URL"] = f"http://127.0.0.1:{port}/api"
    env["SOLRL_TEST_TRACKING_URI"] = f"sqlite:///{base / 'mlruns.db'}"
    yield env
    stop(server)


def start_prefect_server(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    """The Prefect server of `make server` (flows/servers.py) on 127.0.0.1:`port`, once its API answers."""
    server = start_prefect(env, port, log, ROOT)
    if server is None:
        pytest.fail(f"prefect server did not start; see {log}")
    return server


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def solrl(env: dict[str, str], *args: str, cwd: Path | None = None, check: bool = True, timeout: float = 600):
    """Run the `solrl` CLI in a subprocess; return the CompletedProcess."""
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        env=env, cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"solrl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture
def run_cli(session_env):
    def _run(*args: str, **kwargs):
        return solrl(session_env, *args, **kwargs)

    return _run


def tracking_set(env: dict[str, str]) -> list[str]:
    return ["--set", f"tracking.uri={env['SOLRL_TEST_TRACKING_URI']}"]


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models on a busy 2-core machine: one intra-op thread avoids oversubscription stalls."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
