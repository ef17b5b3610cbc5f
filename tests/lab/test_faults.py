"""The fault catalogue (solrl_core/lab/faults): one case of each kind, end to end, must end in a one-line error (or a clean
stop after a signal), lose nothing, leave no process, and resume to a run identical to the uninterrupted reference.
The whole catalogue is a benchmark, not part of the suite: `python -m solrl.flows.lab.faults` (docs/reliability.md)."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cli_processes import smaller_sections
from repo_paths import ROOT, TINY
from solrl_core.lab.faults import damage, outcome, procs, run_catalogue
from solrl_core.lab.faults.catalogue import BY_NAME, CASES, KINDS

# One or more fast cases of each kind (the catalogue has them all).
SUBSET = ("config-not-utf8", "run-dir-is-file", "stage-iteration-negative", "score-final-chunk-deleted",
          "final-checkpoint-flipped", "forced-update-bad-input", "train-sigterm")


@pytest.fixture(scope="module")
def catalogue(session_env, tmp_path_factory) -> run_catalogue.Context:
    out = tmp_path_factory.mktemp("faults")
    env = {**session_env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), session_env.get("PYTHONPATH")]))}
    # the tiny run at the smaller run's sizes (tests/support/cli_processes.py): a case checks where a run stops and
    # what it resumes to, not what it learns, and each runs it two or three times
    base = out / "smaller.yaml"
    base.write_text(json.dumps({"extends": str(TINY), **smaller_sections()}))
    ctx = run_catalogue.Context(out=out, base_config=base, env=env, cwd=ROOT, timeout_s=300,
                         say=lambda line: None)
    run_catalogue.build_reference(ctx)
    return ctx


def test_the_subset_covers_every_kind():
    assert {BY_NAME[name].kind for name in SUBSET} == set(KINDS) == {case.kind for case in CASES}


@pytest.mark.parametrize("name", SUBSET)
def test_fault_ends_in_one_line_and_the_run_resumes_identical(catalogue, name, monkeypatch):
    # Children exit a moment after their command (orphan_guard); on a machine busy with other tests that moment can
    # exceed the catalogue's 3 s: give them longer before counting one as left behind (a passing case waits none of it).
    monkeypatch.setattr(procs, "ORPHAN_GRACE_S", 30.0)
    case = BY_NAME[name]
    record = run_catalogue.run_case(catalogue, case)
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
    journal = ("solrl: error: /r/iter_0001/manifests/regenerate.pending.json is damaged (not valid JSON: x); delete "
               "it and run: solrl stage regenerate --run-dir /r --iteration 1 --force")
    assert outcome.repair_steps(journal, "c") == [
        ("delete", "/r/iter_0001/manifests/regenerate.pending.json"),
        ("solrl", ["stage", "regenerate", "--run-dir", "/r", "--iteration", "1", "--force"])]
    in_the_way = ("solrl: error: iter_0001/manifests in run directory /r is a file, where solrl keeps a directory it "
                  "writes; move it out of the run directory and run the command again")
    assert outcome.repair_steps(in_the_way, "c") == [("move", "/r/iter_0001/manifests"), ("again", None)]
    foreign = ("solrl: error: /r/config.yaml is not a config solrl froze; move yours out of the run directory (e.g. "
               "mv /r/config.yaml my_config.yaml) and run: solrl train my_config.yaml --run-dir /r")
    assert outcome.repair_steps(foreign, "c") == [
        ("mv", ("/r/config.yaml", "my_config.yaml")), ("solrl", ["train", "my_config.yaml", "--run-dir", "/r"])]


def test_damage_steps_do_what_they_say(tmp_path):
    case_dir, run_dir = tmp_path, tmp_path / "run"
    (run_dir / "manifests").mkdir(parents=True)
    (run_dir / "manifests" / "select.json").write_text(json.dumps({"files": {"a": 1}, "metrics": {"reward": 0.5}}))
    (run_dir / "chunk").write_bytes(b"data")
    store = tmp_path / "shared.db"
    store.write_bytes(b"sqlite")
    (run_dir / "run.json").write_text(json.dumps({"tracking_uri": f"sqlite:///{store}", "mlflow_run_id": "r1"}))

    def apply(name, **args):
        return damage.apply((name, args), case_dir, run_dir, {})

    apply("edit_json", path="manifests/select.json", drop="files", set={"metrics.reward": 0.99})
    assert json.loads((run_dir / "manifests" / "select.json").read_text()) == {"metrics": {"reward": 0.99}}
    apply("symlink_loop", path="chu*")
    with pytest.raises(OSError) as err:
        (run_dir / "chunk").read_bytes()
    assert err.value.errno == errno.ELOOP
    apply("replace_with_dir", path="learning_curve.png")
    apply("replace_with_file", path="manifests")
    assert (run_dir / "learning_curve.png").is_dir() and (run_dir / "manifests").is_file()
    apply("symlink", path="{case}/link", target="{case}/gone/run")
    assert (tmp_path / "link").is_symlink() and not (tmp_path / "link").exists()
    apply("fifo", path="{case}/fifo.yaml")
    assert stat.S_ISFIFO((tmp_path / "fifo.yaml").stat().st_mode)
    assert apply("own_store") == [run_dir / "run.json", tmp_path / "mlruns.db"]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["tracking_uri"] == f"sqlite:///{tmp_path / 'mlruns.db'}" and info["mlflow_run_id"] == "r1"
    assert (tmp_path / "mlruns.db").read_bytes() == store.read_bytes()


def test_a_case_environment_may_extend_the_catalogues_path(tmp_path):
    ctx = run_catalogue.Context(out=tmp_path, base_config=TINY, env={"PYTHONPATH": "/repo", "KEEP": "1", "DROP": "1"},
                         cwd=ROOT)
    case = BY_NAME["i29-plugin-import-raises"]
    env = run_catalogue._env(ctx, replace(case, env=(*case.env, ("DROP", None))), {"case": "/c"})
    assert env == {"PYTHONPATH": "/c:/repo", "KEEP": "1"}


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


@pytest.mark.e2e  # starts processes
def test_a_piped_command_keeps_its_own_exit_status(tmp_path):
    # one write only: a second one could meet the pipe that head has closed (EPIPE), which is the case's subject
    argv = run_catalogue._piped([sys.executable, "-c", "import sys; print('one'); sys.exit(3)"], "head -1")
    done = procs.run(argv, dict(os.environ), tmp_path, timeout_s=60)
    assert (done.returncode, done.stdout) == (3, "one\n")


@pytest.mark.e2e  # starts processes
def test_a_case_runs_under_its_ulimits_soft_and_hard(tmp_path):
    script = ("import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE), "
              "resource.getrlimit(resource.RLIMIT_FSIZE))")
    argv = procs.limited([sys.executable, "-c", script], (("-n", 77), ("-f", 2048)))
    done = procs.run(argv, dict(os.environ), tmp_path, timeout_s=60)
    assert (done.returncode, done.stdout) == (0, f"(77, 77) ({2048 * 1024}, {2048 * 1024})\n")
