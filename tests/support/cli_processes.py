"""Processes the end-to-end tests start: the `solrl` CLI, the Prefect server of `make server`, and what they need
(a free loopback port, Ctrl-C as at a terminal, the tracking store of the session)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solrl.flows.servers import start_prefect
from repo_paths import ROOT


def sigint_as_at_a_terminal() -> None:
    """`preexec_fn` for a child that is sent Ctrl-C (or SIGHUP, its terminal closing): SIGINT and SIGHUP at their
    defaults, as in a terminal (a suite started in the background by a shell ignores SIGINT, one under nohup SIGHUP,
    and its children would inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        [sys.executable, "-m", "solrl", *args],
        env=env, cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"solrl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def tracking_set(env: dict[str, str]) -> list[str]:
    """`--set tracking.uri=...`: the session's own MLflow store (session_env), not mlruns.db of the checkout."""
    return ["--set", f"tracking.uri={env['SOLRL_TEST_TRACKING_URI']}"]


def assert_one_line_error(proc, *needles):
    """A CLI run that failed as a user's mistake: exit 2, one line `solrl: error: ...` holding `needles`, no
    traceback."""
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("solrl: error: ")
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0]


# the tiny run, smaller still, for the tests about processes, servers and stores
SMALLER_SETS = ["explore.seeds_per_prompt=4", "select.k=2", "explore.steps=2", "regenerate.steps=2"]
SMALLER_RUN = [a for s in SMALLER_SETS for a in ("--set", s)]
# the later stages alone at those sizes: for tests whose explore must stay slow enough to be stopped inside
SMALLER_AFTER_EXPLORE = [a for s in SMALLER_SETS if not s.startswith("explore.") for a in ("--set", s)]
# the held-out evaluation as small (the tiny run otherwise takes the demo's: 104 samples at 10 steps)
SMALLER_EVAL = [a for s in ("eval.num_prompts=2", "eval.seeds_per_prompt=2", "eval.steps=2") for a in ("--set", s)]


def smaller_sections() -> dict:
    """SMALLER_SETS as config sections ({"explore": {"seeds_per_prompt": 4, ...}, ...}), for a config file that
    extends the tiny run (read as `--set` reads them)."""
    from solrl_core.config.schema import apply_overrides

    return apply_overrides({}, SMALLER_SETS)


def wait_for_path(path: Path, proc: subprocess.Popen, seconds: float = 600) -> None:
    """Wait for `path` to appear while `proc` (a `solrl train`, its stderr piped) runs."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, f"solrl train ended before {path} appeared:\n{proc.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.2)


def folder_entries(path: Path) -> list[str]:
    """The names in `path`, sorted: what a refused command left there."""
    return sorted(p.name for p in path.iterdir())
