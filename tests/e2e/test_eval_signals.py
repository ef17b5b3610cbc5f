"""A signal during `solrl eval` ends it as during `solrl train` (solrl/cli/main.py main): 128 + the signal, the resume line,
no traceback, no evaluation recorded; the same command then computes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from cli_processes import solrl, wait_for_path
from repo_paths import ROOT, TINY
from solrl_core.config.loading import load_config
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import prepare_run


@pytest.mark.e2e  # starts and signals `solrl eval`
def test_sigterm_stops_eval_then_it_resumes(session_env, tmp_path):
    # the policy before training (step 0) of a run frozen as `solrl train` freezes it: how a signal ends the
    # evaluation does not depend on the step, so no training is needed. tiny.yaml's evaluation (26 prompts x 4 seeds,
    # 10 steps) runs for seconds after its partial folder appears: time enough to be signalled while it runs.
    run = RunDir(tmp_path / "run")
    tracking = f"tracking.uri={session_env['SOLRL_TEST_TRACKING_URI']}"  # the session's store (tracking_set)
    prepare_run(run, load_config(TINY, [tracking]))
    assert run.evaluation(0) is None
    args = ["eval", "--run-dir", str(run.root), "--step", "0", "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "solrl", *args], env=session_env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for_path(run.eval_partial_dir(0), proc)  # the evaluation is under way
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "solrl: interrupted; run the same command again to resume" in err and "Traceback" not in err, err[-3000:]
    assert run.evaluation(0) is None

    done = solrl(session_env, *args)
    assert "evaluation after 0 iterations" in done.stdout
    assert run.evaluation(0) is not None
