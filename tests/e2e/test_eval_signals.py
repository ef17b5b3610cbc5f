"""A signal during `solrl eval` ends it as during `solrl train` (solrl/cli/main.py main): 128 + the signal, the resume line,
no traceback, no evaluation recorded; the same command then computes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from cli_processes import SMALLER_RUN, solrl, tracking_set, wait_for_path
from repo_paths import ROOT, TINY
from solrl_core.run.rundir import RunDir


@pytest.mark.e2e  # trains a tiny run, then starts and signals `solrl eval`
@pytest.mark.timeout(1800)
def test_sigterm_stops_eval_then_it_resumes(session_env, tmp_path):
    run_dir = tmp_path / "run"
    # 26 prompts x 16 seeds: an evaluation long enough (seconds) to be signalled while it runs, on any machine
    solrl(session_env, "train", str(TINY), "--iterations", "1", "--run-dir", str(run_dir), "--no-progress", *SMALLER_RUN,
          "--set", "eval.seeds_per_prompt=16", *tracking_set(session_env))
    run = RunDir(run_dir)
    assert run.evaluation(1) is None  # tiny.yaml evaluates nothing while it trains (eval.every: 0)
    args = ["eval", "--run-dir", str(run_dir), "--step", "1", "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "solrl", *args], env=session_env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for_path(run.eval_partial_dir(1), proc)  # the evaluation is under way
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "solrl: interrupted; run the same command again to resume" in err and "Traceback" not in err, err[-3000:]
    assert run.evaluation(1) is None

    done = solrl(session_env, *args)
    assert "evaluation after 1 iteration" in done.stdout
    assert run.evaluation(1) is not None
