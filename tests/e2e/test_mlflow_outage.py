"""MLflow going away, end to end: a run whose MLflow run is gone (its sqlite store deleted, the run deleted in the UI)
gets a new MLflow run, said in one line, and the earlier iterations are logged there again; a tracking server that
dies or stalls (SIGSTOP) mid-run fails `solrl train` in one line within MLflow's bounded request time plus the
logging thread's wait, the run directory complete and consistent, and (the server back) the next `solrl train` logs
what is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from cli_processes import SMALLER_RUN, free_port, solrl
from repo_paths import ROOT, TINY
from solrl.flows.mlflow_server import mlflow_server_argv
from solrl_core.mlflow_links import health_failure
from solrl_core.run.rundir import RunDir

pytestmark = pytest.mark.e2e

# Short bounds for the test (values in the environment win over solrl's): each MLflow request gives up after 3 s,
# once, and the flow waits at most 10 s for a logging once its work is done. What is tested is that the command ends
# in one line within its bounds, whatever they are: solrl's own (3 retries of 15 s) would only make the test longer.
SHORT = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "3", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "SOLRL_TRACKING_WAIT": "10"}
# request bound + drain wait + the iteration under way and the command's exit, on a machine busy with other tests (its
# share of 2 cores); MLflow's own bounds (120 s a request, 7 retries) would take many times this
BOUND_S = 3 + 10 + 90


def _metric_steps(uri: str, run_id: str, key: str = "reward/train_mean") -> list[int]:
    client = mlflow.MlflowClient(tracking_uri=uri)
    return sorted({m.step for m in client.get_metric_history(run_id, key)})


def _one_line(proc, *needles: str) -> str:
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[0].startswith("solrl: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def trained(session_env, tmp_path_factory):
    """The tiny run, 1 iteration, logged to the default store of the folder it ran in: (run directory, its
    run.json)."""
    base = tmp_path_factory.mktemp("outage")
    run_dir = base / "run"
    solrl(session_env, "train", str(TINY), *SMALLER_RUN, "--run-dir", str(run_dir), "--iterations", "1", "--quiet", cwd=base)
    return run_dir, json.loads((run_dir / "run.json").read_text())


def _copy(trained, tmp_path: Path) -> tuple[Path, dict]:
    import shutil

    run_dir, info = trained
    shutil.copytree(run_dir, tmp_path / "run")
    return tmp_path / "run", info


@pytest.mark.parametrize("how", ["store deleted", "run deleted in the UI"])
def test_a_gone_mlflow_run_is_made_again_and_the_earlier_iterations_logged_there(trained, session_env, tmp_path,
                                                                                 how):
    run_dir, info = _copy(trained, tmp_path)
    store = info["tracking_uri"]
    if how == "store deleted":  # as if the copy's store were deleted: its run.json names a file that is not there
        store = f"sqlite:///{tmp_path / 'mlruns.db'}"
        (run_dir / "run.json").write_text(json.dumps({**info, "tracking_uri": store}))
        gone = "no longer exists"
    else:
        client = mlflow.MlflowClient(tracking_uri=store)
        copy_id = client.create_run(info["experiment_id"]).info.run_id  # the copy's own MLflow run, then deleted
        (run_dir / "run.json").write_text(json.dumps({**info, "mlflow_run_id": copy_id}))
        info = {**info, "mlflow_run_id": copy_id}
        client.delete_run(copy_id)
        gone = "was deleted"
    proc = solrl(session_env, "train", str(TINY), *SMALLER_RUN, "--run-dir", str(run_dir), "--iterations", "2", "--quiet",
                 cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    new = json.loads((run_dir / "run.json").read_text())
    assert new["tracking_uri"] == store and new["mlflow_run_id"] != info["mlflow_run_id"]
    (line,) = [line for line in proc.stderr.splitlines() if line.strip()]
    assert line == (f"solrl: the MLflow run {info['mlflow_run_id']} {gone} in {store}: logging to a new run "
                    f"{new['mlflow_run_id']}; `solrl train` logs the run's earlier iterations and evaluations there "
                    "again")
    assert _metric_steps(store, new["mlflow_run_id"]) == [0, 1]  # iteration 0 logged again, iteration 1 new
    markers = [json.loads(RunDir(run_dir).iteration_dir(i).joinpath("manifests", "logged.json").read_text())
               for i in (0, 1)]
    assert {m["mlflow_run_id"] for m in markers} == {new["mlflow_run_id"]}


class Server:
    """`mlflow server` on 127.0.0.1:`port` with its own sqlite store, in its own process group (stopped, killed or
    restarted by the test)."""

    def __init__(self, folder: Path, port: int):
        self.folder, self.port, self.uri = folder, port, f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> Server:
        log = open(self.folder / "mlflow-server.log", "a")
        argv = mlflow_server_argv(self.port, f"sqlite:///{self.folder / 'server.db'}", str(self.folder / "artifacts"))
        self.process = subprocess.Popen(argv, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = time.monotonic() + 180
        while health_failure(f"{self.uri}/health"):
            assert self.process.poll() is None and time.monotonic() < deadline, \
                (self.folder / "mlflow-server.log").read_text()[-3000:]
            time.sleep(0.5)
        return self

    def signal(self, signum: int) -> None:
        os.killpg(self.process.pid, signum)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
            self.process.wait(timeout=30)


@pytest.fixture
def server(tmp_path):
    server = Server(tmp_path, free_port())
    yield server.start()
    server.stop()


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.2)


@pytest.mark.parametrize("outage", ["killed", "stopped"])
def test_a_tracking_server_that_dies_or_stalls_mid_run_fails_the_command_in_one_line(server, session_env, tmp_path,
                                                                                   outage):
    run_dir = tmp_path / "run"
    env = {**session_env, **SHORT}
    args = ["train", str(TINY), *SMALLER_RUN, "--run-dir", str(run_dir), "--no-progress", "--set", f"tracking.uri={server.uri}"]
    proc = subprocess.Popen([sys.executable, "-m", "solrl", *args], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(RunDir(run_dir).manifest_path(0, "update"), proc)  # iteration 0 done: its logging starts
        server.signal(signal.SIGKILL if outage == "killed" else signal.SIGSTOP)
        gone = time.monotonic()
        _, stderr = proc.communicate(timeout=300)
        took = time.monotonic() - gone
    finally:
        if proc.poll() is None:
            proc.kill()
    failed = subprocess.CompletedProcess(args, proc.returncode, "", stderr)
    line = _one_line(failed, server.uri, "the run directory is complete and consistent", "run the same command again")
    assert took < BOUND_S, (took, line)

    run = RunDir(run_dir)  # consistent: no commit left under way, every stage complete or never started
    assert not list(run_dir.glob("iter_*/manifests/*.pending.json")) and not list(run_dir.glob("iter_*/*.partial"))
    if outage == "stopped":  # the catch-up is the same after either outage: the killed case checks it
        return
    server.stop()
    server.start()  # the server answers again (same store, same address): the same command catches up
    again = solrl(session_env, "train", str(TINY), *SMALLER_RUN, "--run-dir", str(run_dir), "--quiet", "--set",
                  f"tracking.uri={server.uri}", check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert all(run.is_complete(i, "update") for i in (0, 1))
    info = json.loads((run_dir / "run.json").read_text())
    assert _metric_steps(server.uri, info["mlflow_run_id"]) == [0, 1]
