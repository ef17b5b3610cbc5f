"""The fault catalogue (solrl_core/faults): one case of each kind, end to end, must end in a one-line error (or a clean
stop after a signal), lose nothing, leave no process, and resume to a run identical to the uninterrupted reference.
The whole catalogue is a benchmark, not part of the suite: `python -m flows.faults` (README, Reliability)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, TINY
from solrl_core.faults import outcome, procs, runner
from solrl_core.faults.catalogue import BY_NAME, CASES, KINDS

# One or more fast cases of each kind (the catalogue has them all).
SUBSET = ("config-not-utf8", "run-dir-is-file", "stage-iteration-negative", "score-final-chunk-deleted",
          "final-checkpoint-flipped", "forced-update-bad-input", "train-sigterm")


@pytest.fixture(scope="module")
def catalogue(session_env, tmp_path_factory) -> runner.Context:
    out = tmp_path_factory.mktemp("faults")
    env = {**session_env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), session_env.get("PYTHONPATH")]))}
    ctx = runner.Context(out=out, base_config=TINY, env=env, cwd=ROOT, timeout_s=300,
                         say=lambda line: None)
    runner.build_reference(ctx)
    return ctx


def test_the_subset_covers_every_kind():
    assert {BY_NAME[name].kind for name in SUBSET} == set(KINDS) == {case.kind for case in CASES}


@pytest.mark.parametrize("name", SUBSET)
def test_fault_ends_in_one_line_and_the_run_resumes_identical(catalogue, name):
    case = BY_NAME[name]
    record = runner.run_case(catalogue, case)
    assert record["outcome"] == "clean", record
    assert not record["orphans"] and not record["lost"], record
    if case.repair or case.expect == "interrupt":
        assert record["after"] == "identical", record


def test_repair_steps_are_read_from_the_message_in_order():
    message = ("solrl: error: config.yaml is damaged; delete /r/config.yaml and run solrl train THAT_CONFIG "
               "--run-dir /r (another config would not match); otherwise start a new --run-dir")
    assert outcome.repair_steps(message, "/c.yaml") == [
        ("delete", "/r/config.yaml"), ("solrl", ["train", "/c.yaml", "--run-dir", "/r"])]
    assert outcome.repair_steps("x is damaged; delete /r/init and run the command again.", "/c.yaml") == [
        ("delete", "/r/init"), ("again", None)]
    assert outcome.repair_steps("rebuild it: solrl stage select --run-dir /r --iteration 1 --force", "c") == [
        ("solrl", ["stage", "select", "--run-dir", "/r", "--iteration", "1", "--force"])]


def _finished(rc, stderr, **kw):
    return procs.Finished(["solrl"], rc, "", stderr, 1.0, **kw)


def test_classifier():
    one_line = "progress...\nsolrl: error: config file is not UTF-8 text\n"
    assert outcome.first_outcome("error", _finished(2, one_line), []) == "clean"
    assert outcome.first_outcome("error", _finished(2, one_line), ["iter_0000/update/checkpoint/ema.safetensors"]) \
        == "lost"
    assert outcome.first_outcome("error", _finished(1, "Traceback (most recent call last):\n  ...\nKeyError: 1\n"),
                                 []) == "traceback"
    assert outcome.first_outcome("error", _finished(0, ""), []) == "silent"
    assert outcome.first_outcome("error", _finished(1, "something went wrong\n"), []) == "unclear"
    assert outcome.first_outcome("error", _finished(2, one_line, orphans=["12 prefect server"]), []) == "orphan"
    stopped = "solrl: interrupted; run the same command again to resume\n"
    assert outcome.first_outcome("interrupt", _finished(130, stopped, signalled="SIGTERM after 3.0 s"), []) == "clean"
    assert outcome.first_outcome("interrupt", _finished(-9, "", signalled="SIGKILL after 3.0 s"), []) == "clean"


@pytest.mark.e2e  # starts processes
def test_a_process_left_behind_is_found_and_killed(tmp_path):
    # the command exits at once; its child (in a session of its own) sleeps on
    child = tmp_path / "child.pid"
    script = f"import subprocess, sys; p = subprocess.Popen(['sleep', '60'], start_new_session=True); " \
             f"open({str(child)!r}, 'w').write(str(p.pid))"
    done = procs.run([sys.executable, "-c", script], dict(os.environ), tmp_path, timeout_s=60)
    assert done.returncode == 0
    pid = int(child.read_text())
    assert [line.split()[0] for line in done.orphans] == [str(pid)]
    assert not _alive(pid)  # the runner killed it


def _alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped by init counts as gone)."""
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except FileNotFoundError:
            return False
        if state == "Z":
            return False
        time.sleep(0.1)
    return True


@pytest.mark.e2e  # starts processes
def test_a_hang_is_killed_at_the_time_limit(tmp_path):
    done = procs.run([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), tmp_path, timeout_s=2)
    assert done.timed_out and not done.orphans
    assert outcome.first_outcome("error", done, []) == "hang"


@pytest.mark.e2e  # starts processes
def test_a_signal_waits_for_its_moment(tmp_path):
    flag = tmp_path / "started"
    script = f"import pathlib, time; pathlib.Path({str(flag)!r}).touch(); time.sleep(60)"
    done = procs.run([sys.executable, "-c", script], dict(os.environ), tmp_path, timeout_s=60,
                     sig=procs.Signal(signal.SIGTERM, flag.exists))
    assert flag.exists() and done.signalled.startswith("SIGTERM") and done.returncode == -signal.SIGTERM
