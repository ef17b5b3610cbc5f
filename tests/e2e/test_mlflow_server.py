"""The server path of `make server`'s MLflow (`python -m solrl.flows.mlflow_server`, artifacts proxied) beside a plain
`solrl train` in the same folder: a run made through the server and one made without a tracking URI both work, print
only their summary under --quiet (no MLflow "View run" lines), link the server's UI in the training view, and keep
their artifacts where the server serves them; once the server is stopped, a run that needs it is refused in one line
before any work."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from cli_processes import SMALLER_RUN, free_port, solrl, stop
from repo_paths import ROOT, TINY
from solrl_core.mlflow_links import TRAINING_VIEW, server_record
from solrl_core.run.rundir import RunDir

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A folder whose ./mlruns.db an MLflow server serves, started as `make server` starts it: (folder, its URI,
    the server process)."""
    folder = tmp_path_factory.mktemp("checkout")
    store, port = f"sqlite:///{folder / 'mlruns.db'}", free_port()
    log = open(folder / "mlflow-server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "solrl.flows.mlflow_server", str(port), store,
                               str(folder / "mlartifacts")], cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    deadline = time.monotonic() + 180
    while not server_record(store).is_file():
        assert server.poll() is None and time.monotonic() < deadline, (folder / "mlflow-server.log").read_text()
        time.sleep(0.5)
    yield folder, f"http://127.0.0.1:{port}", server
    stop(server)


def _artifacts(uri: str, run_id: str, path: str = "") -> set[str]:
    query = f"run_id={run_id}" + (f"&path={path}" if path else "")
    listing = json.loads(urllib.request.urlopen(f"{uri}/api/2.0/mlflow/artifacts/list?{query}", timeout=30).read())
    return {f["path"] for f in listing.get("files", [])}


def test_plain_train_beside_make_servers_mlflow_logs_through_it_and_is_refused_in_one_line_once_it_stops(
        served, session_env):
    folder, uri, server = served
    one = ["--iterations", "1", "--quiet"]
    # a run made through the server: its experiment keeps artifacts on the server (mlflow-artifacts:)
    through = solrl(session_env, "train", str(TINY), *SMALLER_RUN, "--run-dir", str(folder / "through"), *one,
                    "--set", f"tracking.uri={uri}", cwd=folder)
    (line,) = through.stdout.splitlines()  # the summary alone: no "View run / View experiment" lines
    assert line.startswith(f"trained 1 iteration in {folder / 'through'}; reward/train_mean by iteration: ")
    # a plain `solrl train` in the same folder: the default ./mlruns.db, which that server serves
    plain = solrl(session_env, "train", str(TINY), *SMALLER_RUN, "--run-dir", str(folder / "plain"), "--iterations", "1",
                  "--no-progress", cwd=folder)
    info = json.loads((folder / "plain" / "run.json").read_text())
    assert info["tracking_uri"] == f"sqlite:///{folder / 'mlruns.db'}"  # the store; the server is the way to it
    run_url = f"{uri}/#/experiments/{info['experiment_id']}/runs/{info['mlflow_run_id']}?{TRAINING_VIEW}"
    assert f"MLflow run    : {run_url}" in plain.stdout
    assert "View run" not in plain.stdout and "mlflow ui" not in plain.stdout and "--port 5000" not in plain.stdout
    assert _artifacts(uri, info["mlflow_run_id"]) >= {"config.yaml", "pool", "shards"}
    assert "pool/iter_0000/candidates.json" in _artifacts(uri, info["mlflow_run_id"], "pool/iter_0000")
    status = solrl(session_env, "status", "--run-dir", str(folder / "plain"), cwd=folder).stdout
    assert f"open: {run_url}" in status and "start a UI" not in status

    stop(server)  # the server goes, and its record with it
    assert not server_record(info["tracking_uri"]).exists()
    resumed = solrl(session_env, "train", str(TINY), *SMALLER_RUN, "--run-dir", str(folder / "plain"), "--iterations", "2",
                    "--quiet", cwd=folder, check=False)
    assert resumed.returncode == 2 and resumed.stdout == ""
    assert len(resumed.stderr.strip().splitlines()) == 1
    assert f"MLflow run {info['mlflow_run_id']}" in resumed.stderr and "keeps its artifacts on an MLflow server" \
        in resumed.stderr and f"`make server` in {folder}" in resumed.stderr
    assert not RunDir(folder / "plain").iteration_dir(1).exists()  # refused before any work
    new = solrl(session_env, "train", str(TINY), *SMALLER_RUN, "--run-dir", str(folder / "new"), *one, cwd=folder, check=False)
    assert new.returncode == 2 and "experiment 'solrl'" in new.stderr and "tracking.experiment" in new.stderr


def test_make_server_starts_mlflow_through_flows_mlflow_server_and_says_where_it_is():
    port = free_port()
    plan = subprocess.run(["make", "-n", "server", f"MLFLOW_PORT={port}", f"VENV={sys.prefix}"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert (f'{sys.prefix}/bin/python -m solrl.flows.mlflow_server {port} "sqlite:///{ROOT}/mlruns.db" '
            f'"{ROOT}/mlartifacts" --host 127.0.0.1 ') in plan
    assert f"MLFLOW_TRACKING_URI=http://127.0.0.1:{port}" in plan
    assert f"http://127.0.0.1:{port}/#/experiments?{TRAINING_VIEW}" in plan
