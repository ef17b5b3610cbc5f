"""`solrl status` of a run another live process holds names that process (the unit test: tests/unit/run/
test_status_running.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import prepare_run
from solrl_core.status import run_status


@pytest.mark.e2e  # starts a process
def test_a_run_held_by_another_process_is_running(tmp_path):
    run = RunDir(tmp_path / "run")
    with run.hold():
        prepare_run(run, load_config(TINY))
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from solrl_core.run.rundir import RunDir
        with RunDir({str(run.root)!r}).hold():
            print("held", flush=True)
            sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert run_status(run)["running"].startswith(f"pid {holder.pid} on host ")
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert run_status(run)["running"] is None
