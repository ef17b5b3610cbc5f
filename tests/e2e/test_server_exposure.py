"""The servers of `make server` beyond loopback (solrl_core/exposure.py): asked to bind every address (0.0.0.0)
without credentials, each refuses in one line before it starts; started with credentials (on 127.0.0.2, an address
other than 127.0.0.1 that the test can reach), a call without them or with a wrong password is rejected and one with
them works."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from cli_processes import SMALLER_RUN, assert_one_line_error, free_port, stop
from repo_paths import ROOT, TINY

BEYOND = "0.0.0.0"  # every address of the machine: beyond loopback
USER, PASSWORD = "alice", "s3cret-for-the-test"


CALL_TIMEOUT = 120  # seconds: the first call that reaches MLflow's store makes its schema, slow on a loaded machine


def _status(url: str, auth: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}
                                     if auth else {})
    try:
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _call(url: str, body: dict | None = None) -> bytes:
    """An authenticated GET, or POST of `body` as JSON."""
    headers = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode(),
               "Content-Type": "application/json"}
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    with urllib.request.urlopen(request, timeout=CALL_TIMEOUT) as response:
        return response.read()


def _wait(url: str, proc: subprocess.Popen, log, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            assert proc.poll() is None, f"the server exited; see {log}"
            assert time.monotonic() < deadline, f"the server did not answer; see {log}"
            time.sleep(0.2)


def _clean(session_env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in session_env.items() if k not in ("PREFECT_SERVER_API_AUTH_STRING",
                                                              "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}


@pytest.mark.e2e
@pytest.mark.parametrize("argv, needles", [
    (["-m", "solrl.flows.servers", "prefect", "4999", "--host", BEYOND], ("Prefect server would listen on 0.0.0.0",
                                                                    "PREFECT_SERVER_API_AUTH_STRING=user:password")),
    (["-m", "solrl.flows.mlflow_server", "4999", "sqlite:///x.db", "art", "--host", BEYOND],
     ("MLflow server would listen on 0.0.0.0", "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD")),
], ids=["prefect", "mlflow"])
def test_beyond_loopback_without_credentials_is_refused(session_env, tmp_path, argv, needles):
    proc = subprocess.run([sys.executable, *argv], env=_clean(session_env), cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert_one_line_error(proc, *needles, "--insecure")
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "art").exists()


@pytest.mark.e2e
def test_prefect_with_basic_auth_rejects_calls_without_it(session_env, tmp_path):
    port = free_port()
    env = {**_clean(session_env), "PREFECT_SERVER_API_AUTH_STRING": f"{USER}:{PASSWORD}"}
    env.pop("PREFECT_API_URL", None)
    log = tmp_path / "prefect.log"
    proc = subprocess.Popen([sys.executable, "-m", "solrl.flows.servers", "prefect", str(port), "--database",
                             str(tmp_path / "prefect.db"), "--host", "127.0.0.2"], env=env, cwd=ROOT,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        api = f"http://127.0.0.2:{port}/api"
        _wait(f"{api}/health", proc, log)
        assert _status(f"{api}/version") == 401
        assert _status(f"{api}/version", f"{USER}:wrong") == 401
        assert _status(f"{api}/version", f"{USER}:{PASSWORD}") == 200
    finally:
        stop(proc)


@pytest.mark.e2e
def test_mlflow_with_basic_auth_rejects_calls_without_it_and_a_run_keeps_the_password_secret(session_env, tmp_path):
    """Then a run logs to it with the password inside tracking.uri (as a team writes it): the run works, and no file
    of the run directory, of MLflow's store and artifacts, of Prefect's database, nor the terminal holds it."""
    port = free_port()
    env = {**_clean(session_env), "MLFLOW_TRACKING_USERNAME": USER, "MLFLOW_TRACKING_PASSWORD": PASSWORD}
    log = tmp_path / "mlflow.log"
    proc = subprocess.Popen([sys.executable, "-m", "solrl.flows.mlflow_server", str(port), f"sqlite:///{tmp_path / 'mlruns.db'}",
                             str(tmp_path / "mlartifacts"), "--host", "127.0.0.2"],
                            env=env, cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        base = f"http://127.0.0.2:{port}"
        _wait(f"{base}/health", proc, log)
        search = f"{base}/api/2.0/mlflow/experiments/search?max_results=1"
        assert _status(search) == 401
        assert _status(search, f"{USER}:wrong") == 401
        assert _status(search, f"{USER}:{PASSWORD}") == 200

        run_env = {k: v for k, v in _clean(session_env).items() if k != "PREFECT_API_URL"}  # a temporary Prefect
        run_env["PREFECT_HOME"] = str(tmp_path / "prefect")  # server, its database here
        train = subprocess.run([sys.executable, "-m", "solrl", "train", str(TINY), "--iterations", "1",
                                "--run-dir", str(tmp_path / "run"), "--no-progress", *SMALLER_RUN, "--set",
                                f"tracking.uri=http://{USER}:{PASSWORD}@127.0.0.2:{port}"],
                               env=run_env, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert train.returncode == 0, train.stderr[-3000:]
        experiments = json.loads(_call(f"{base}/api/2.0/mlflow/experiments/search?max_results=100"))["experiments"]
        found = json.loads(_call(f"{base}/api/2.0/mlflow/runs/search",
                                 {"experiment_ids": [e["experiment_id"] for e in experiments]}))
        assert len(found["runs"]) == 1  # the run was logged through the authenticated server
    finally:
        stop(proc)
    assert PASSWORD not in train.stdout + train.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p != log]
    assert (tmp_path / "run" / "run.json") in files and (tmp_path / "mlruns.db") in files
    assert any(p.name.startswith("prefect") and p.suffix == ".db" for p in files)
    assert not [p for p in files if PASSWORD.encode() in p.read_bytes()]
