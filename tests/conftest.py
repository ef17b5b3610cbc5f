"""Shared fixtures: a real Prefect server on 127.0.0.1 for the whole session, and a runner for the `solrl` CLI.

Tests marked `e2e` start processes or servers; `make test-fast` (`pytest -m "not e2e"`) leaves them out. A test that
uses a fixture of E2E_FIXTURES is marked automatically; any other test that starts a process must be marked by hand
(`@pytest.mark.e2e` or the module's `pytestmark`): an unmarked test that does fails, naming the mark.
"""

from __future__ import annotations

import multiprocessing.util
import os
import signal
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


# Fixtures that start a server or drive the CLI in subprocesses: every test using one (even indirectly) is e2e.
E2E_FIXTURES = {"session_env", "run_cli", "s3_server", "dask_cluster"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if E2E_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)


_started: list[str] = []  # processes started by the running test (filled only while a test that is not e2e runs)
_watching = False


def _note(what: str) -> None:
    if _watching:
        _started.append(what)


os.register_at_fork(before=lambda: _note("os.fork"))
_popen_init = subprocess.Popen.__init__
_spawnv_passfds = multiprocessing.util.spawnv_passfds


# Libraries probing the system once when first imported (ctypes.util.find_library, platform): not the test's own work,
# and which test imports them first depends on the order the tests run in.
_PROBES = {"ldconfig", "gcc", "cc", "ld", "objdump", "uname"}


def _watched_popen(self, args, *rest, **kwargs):
    argv = [args] if isinstance(args, str) else list(map(str, args))
    if os.path.basename(argv[0].split()[0]) not in _PROBES:
        _note(f"subprocess {' '.join(argv)[:120]}")
    return _popen_init(self, args, *rest, **kwargs)


def _watched_spawn(path, args, passfds):
    _note(f"multiprocessing {path}")
    return _spawnv_passfds(path, args, passfds)


subprocess.Popen.__init__ = _watched_popen
multiprocessing.util.spawnv_passfds = _watched_spawn


def pytest_runtest_setup(item):
    """Watch a test left in `make test-fast` (not marked e2e) from its fixtures' setup to their teardown."""
    global _watching
    _started.clear()
    _watching = item.get_closest_marker("e2e") is None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A test that is not e2e must have started no process: fail it, naming the mark to add."""
    global _watching
    try:
        return (yield)
    finally:
        watched, _watching = _watching, False
        if watched and _started:
            pytest.fail(f"{item.nodeid} started a process ({_started[0]}): mark it @pytest.mark.e2e so that "
                        "`make test-fast` leaves it out", pytrace=False)


def sigint_as_at_a_terminal() -> None:
    """`preexec_fn` for a child that is sent Ctrl-C: SIGINT at its default, as in a terminal (a suite started in the
    background by a shell ignores SIGINT, and its children would inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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
