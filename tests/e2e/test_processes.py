"""Signals and children: SIGINT (a terminal's Ctrl-C, to the whole process group), SIGTERM, SIGHUP (the terminal
closed) and SIGKILL stop `solrl train` mid-run or during its start-up, no process it started outlives it (the temporary
Prefect server, the Dask workers), and the same command then resumes and finishes (after SIGTERM, the clean stop the
other two share, and after SIGKILL). Commands with nothing to compute start no Prefect server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from cli_processes import SMALLER_EVAL, SMALLER_RUN, sigint_as_at_a_terminal, solrl, tracking_set, wait_for_path
from repo_paths import ROOT, TINY
from solrl_core.run.rundir import STAGES, RunDir

MARK = "SOLRL_TEST_PROCESS_MARK"  # inherited by every process the command starts
SERVER_DB = "prefect.db"  # written under PREFECT_HOME by a Prefect server only


def no_server_env(session_env: dict[str, str], home: Path) -> dict[str, str]:
    """No PREFECT_API_URL (a command that runs flows starts a temporary server) and a private PREFECT_HOME."""
    env = {k: v for k, v in session_env.items() if k != "PREFECT_API_URL"}
    return {**env, "PREFECT_HOME": str(home), MARK: uuid.uuid4().hex}


def marked(env: dict[str, str]) -> list[psutil.Process]:
    """The live processes whose environment carries this command's mark."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(MARK) == env[MARK]:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def wait_until_gone(env: dict[str, str], seconds: float = 60) -> list[str]:
    """Command lines of the marked processes still alive after `seconds` (the children stop asynchronously)."""
    deadline = time.monotonic() + seconds
    while (left := marked(env)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return [" ".join(p.cmdline())[:200] for p in left if p.is_running()]


@pytest.mark.timeout(1800)  # two runs of the tiny config (the SIGKILL one on two Dask workers), on a busy machine
# SIGHUP goes to the command alone and stops it as SIGTERM does (the same handler, the same exit path): the start-up
# test below checks its exit; SIGINT goes to the whole group, as a terminal's Ctrl-C, children included
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_signal_stops_train_and_every_child_then_it_resumes(session_env, tmp_path, how):
    env = no_server_env(session_env, tmp_path / "prefect")
    run_dir = tmp_path / "run"
    # SIGKILL: with two devices, so that Dask workers (which must notice by themselves) are running too
    dask = how == "SIGKILL"
    args = ["train", str(TINY), "--iterations", "1", "--run-dir", str(run_dir), "--no-progress",
            *SMALLER_RUN, *(["--set", "orchestration.devices=[cpu, cpu]"] if dask else []), *tracking_set(session_env)]
    proc = subprocess.Popen([sys.executable, "-m", "solrl", *args], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=sigint_as_at_a_terminal)
    try:
        # mid-run; after explore the Dask cluster serves the stages up to the update
        wait_for_path(RunDir(run_dir).manifest_path(0, "explore" if dask else "quantize"), proc)
        children = [p for p in marked(env) if p.pid != proc.pid]
        assert len(children) >= (3 if dask else 1), [p.cmdline() for p in children]  # the server (+ 2 workers)
        assert (tmp_path / "prefect" / SERVER_DB).is_file()  # the temporary Prefect server's database
        if how == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        else:
            os.kill(proc.pid, getattr(signal, how))
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if how == "SIGKILL":
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 128 + getattr(signal, how), err[-3000:]
        assert "solrl: interrupted; run the same command again to resume" in err
    assert wait_until_gone(env) == []
    assert not RunDir(run_dir).is_complete(0, "update")
    if how == "SIGINT":
        return  # it stops as SIGTERM does (the same handler, the same exit path): its resume stands for SIGINT's

    done = solrl(env, *args)
    assert "trained 1 iteration" in done.stdout
    assert all(RunDir(run_dir).is_complete(0, stage) for stage in STAGES)
    assert wait_until_gone(env) == []


@pytest.mark.timeout(900)
@pytest.mark.parametrize("how, after_s", [("SIGINT", 1.0), ("SIGTERM", 2.0), ("SIGHUP", 3.0)])
def test_a_signal_during_start_up_stops_train_with_the_interrupted_exit(session_env, tmp_path, how, after_s):
    """Seconds after start-up (imports, config, the temporary Prefect server starting): the interrupted exit and the
    resume line, never a run that goes on and exits 0."""
    env = no_server_env(session_env, tmp_path / "prefect")
    args = ["train", str(TINY), "--iterations", "1", "--run-dir", str(tmp_path / "run"), "--no-progress", *SMALLER_RUN,
            *tracking_set(session_env)]
    proc = subprocess.Popen([sys.executable, "-m", "solrl", *args], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=sigint_as_at_a_terminal)
    try:
        time.sleep(after_s)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        os.killpg(proc.pid, getattr(signal, how))
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + getattr(signal, how), err[-3000:]
    assert "solrl: interrupted; run the same command again to resume" in err
    assert "Traceback" not in err, err[-3000:]
    assert wait_until_gone(env) == []


PARENT = """import subprocess, sys, time
from solrl_core.orphan_guard import guarded
subprocess.Popen(guarded(sys.argv[1:]))
time.sleep(600)
"""


@pytest.mark.e2e  # starts processes
def test_orphan_guard_stops_the_child_of_a_killed_parent(tmp_path):
    """What the temporary server and torchrun run under: the parent is SIGKILLed, its child stops by itself."""
    pid_file = tmp_path / "child.pid"
    child = [sys.executable, "-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
             "time.sleep(600)"]
    parent = subprocess.Popen([sys.executable, "-c", PARENT, *child], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.is_file() and pid_file.read_text()):
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.1)
        child_process = psutil.Process(int(pid_file.read_text()))
        assert child_process.ppid() == parent.pid  # the guard became the child (exec), no process in between
        parent.kill()
        parent.wait()
        child_process.wait(timeout=30)  # raises psutil.TimeoutExpired if the child outlives its parent
    finally:
        if parent.poll() is None:
            parent.kill()


def test_commands_with_nothing_to_compute_start_no_prefect_server(session_env, tmp_path):
    run_dir = tmp_path / "run"
    args = ["--run-dir", str(run_dir)]
    train = ["train", str(TINY), *SMALLER_RUN, *SMALLER_EVAL, "--iterations", "1", *args]
    solrl(session_env, *train, "--no-progress", *tracking_set(session_env))

    computing = no_server_env(session_env, tmp_path / "home-eval")
    first = solrl(computing, "eval", "--step", "1", *args)  # computes: a flow on a temporary server
    assert (tmp_path / "home-eval" / SERVER_DB).is_file()
    assert wait_until_gone(computing) == []

    env = no_server_env(session_env, tmp_path / "home")
    again = solrl(env, "eval", "--step", "1", *args).stdout  # the stored evaluation, printed again
    assert sorted(again.splitlines()) == sorted(first.stdout.splitlines())
    assert "already complete" in solrl(env, "stage", "update", "--iteration", "0", *args).stdout
    assert "iterations   : 1 of 1 complete" in solrl(env, "status", *args).stdout
    with RunDir(run_dir).hold():
        held = solrl(env, *train, check=False)
    assert held.returncode == 2 and "is held by" in held.stderr
    assert not (tmp_path / "home" / SERVER_DB).exists()
