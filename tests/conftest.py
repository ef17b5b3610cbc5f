"""The suite's rules and the fixtures every folder shares.

Layout and the e2e mark: tests/support/suite_layout.py (unit tests by area under tests/unit/, tests that start
processes or servers under tests/e2e/, the lab tooling's under tests/lab/). `make test-fast` (`pytest -m "not e2e"`)
leaves the e2e tests out; a test left in that starts a process fails, naming the mark to add. The helper modules of
tests/support/ are importable from every test (sys.path, below).

Each test process (each xdist worker) has its own PREFECT_HOME, so that Prefect's temporary servers and anything else
that falls back to ~/.prefect never share a database with another worker or another suite on the machine.
"""

from __future__ import annotations

import atexit
import multiprocessing.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))  # `from repo_paths import ROOT, TINY`, ...

# Before Prefect and torch load: a Prefect home of this process's own (removed at exit), and OpenMP threads that do
# not spin while waiting (they stall badly on a shared 2-core machine).
_PREFECT_HOME = tempfile.mkdtemp(prefix="solrl-tests-prefect-")
atexit.register(shutil.rmtree, _PREFECT_HOME, ignore_errors=True)
os.environ["PREFECT_HOME"] = _PREFECT_HOME
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from cli_processes import free_port, solrl, start_prefect_server, stop  # noqa: E402 - support/ is on sys.path from here
from suite_layout import heavy_files_first, mark_e2e_and_check_placement  # noqa: E402


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(config, items):
    mark_e2e_and_check_placement(items)
    heavy_files_first(items)  # the order `make test` hands files to its workers in (suite_layout.py)


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


@pytest.fixture(scope="session", autouse=True)
def solrl_cache_dir(tmp_path_factory) -> str:
    """solrl's cache folder (the editing world's source images) in the session's temporary directory, for the tests'
    own code and the commands they start: no test writes into the user's ~/.cache."""
    from solrl_core.worlds.edits import CACHE_ENV

    folder = str(tmp_path_factory.mktemp("solrl-cache"))
    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = folder
    yield folder
    if old is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = old


@pytest.fixture(scope="session")
def session_env(tmp_path_factory, solrl_cache_dir) -> dict[str, str]:
    """Environment for CLI subprocesses: private PREFECT_HOME, a Prefect server on loopback, quiet logs, a tracking
    store. Session-scoped, so one per test process: each xdist worker of `make test` has its own server and store."""
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


@pytest.fixture
def run_cli(session_env):
    def _run(*args: str, **kwargs):
        return solrl(session_env, *args, **kwargs)

    return _run


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models on a busy 2-core machine: one intra-op thread avoids oversubscription stalls."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
