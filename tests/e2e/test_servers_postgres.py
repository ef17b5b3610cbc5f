"""`make server SERVER_DATABASE=postgresql://...`: Prefect's and MLflow's servers on a PostgreSQL server (Debian's
package, a throw-away cluster: tests/support/postgres_cluster.py), started as `make server` starts them. A run trained
through them is kept in their databases, the training deployment's schedule makes its runs there, writers from many
threads at once meet no busy database, and a database not created yet is said in one line before a server starts.
The same servers on SQLite: tests/e2e/test_servers.py, test_mlflow_server.py, test_deploy.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from cli_processes import SMALLER_RUN, free_port, solrl, stop
from postgres_cluster import postgres_server
from repo_paths import ROOT, TINY
from solrl.flows.servers import DATABASE_URL_SETTINGS, start_prefect

pytestmark = pytest.mark.e2e

NAME = "pg-team"


def _wait_for_health(url: str, server: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    """(PostgreSQL URL, the environment of a user of the two servers, a folder of theirs)."""
    folder = tmp_path_factory.mktemp("team")
    env = {**os.environ, "PREFECT_HOME": str(folder / "home"), "PREFECT_LOGGING_LEVEL": "WARNING",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    for name in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", *DATABASE_URL_SETTINGS):
        env.pop(name, None)
    with postgres_server(("prefect", "mlflow")) as url:
        prefect_port, mlflow_port = free_port(), free_port()
        prefect = start_prefect(env, prefect_port, folder / "prefect.log", ROOT, database=f"{url}/prefect")
        assert prefect is not None, (folder / "prefect.log").read_text()
        mlflow = subprocess.Popen([sys.executable, "-m", "solrl.flows.mlflow_server", str(mlflow_port), f"{url}/mlflow",
                                   str(folder / "mlartifacts")], env=env, cwd=folder, start_new_session=True,
                                  stdout=open(folder / "mlflow.log", "w"), stderr=subprocess.STDOUT)
        try:
            _wait_for_health(f"http://127.0.0.1:{mlflow_port}/health", mlflow, folder / "mlflow.log")
            assert "Prefect database: postgresql://***@127.0.0.1:" in (folder / "prefect.log").read_text()
            yield url, {**env, "PREFECT_API_URL": f"http://127.0.0.1:{prefect_port}/api",
                        "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{mlflow_port}"}, folder
        finally:
            stop(mlflow)
            stop(prefect)


def _rows(url: str, query: str) -> list[tuple]:
    import psycopg2

    with psycopg2.connect(url) as connection, connection.cursor() as cursor:
        cursor.execute(query)
        return cursor.fetchall()


def test_a_run_through_the_servers_is_kept_in_their_postgresql_databases(team):
    url, env, folder = team
    solrl(env, "train", str(TINY), "--run-dir", str(folder / "run"), "--iterations", "1", "--quiet", *SMALLER_RUN,
          "--set", "tracking.uri=" + env["MLFLOW_TRACKING_URI"])
    flows = dict(_rows(f"{url}/prefect", "select f.name, r.state_type from flow_run r join flow f on f.id = r.flow_id"))
    assert flows and set(flows.values()) == {"COMPLETED"}, flows
    tasks = _rows(f"{url}/prefect", "select count(*) from task_run where state_type = 'COMPLETED'")[0][0]
    assert tasks >= 7  # every stage of the iteration
    (status,), = _rows(f"{url}/mlflow", "select status from runs")
    assert status == "FINISHED"
    assert _rows(f"{url}/mlflow", "select count(distinct key) from latest_metrics")[0][0] > 5


def test_the_training_deployments_schedule_makes_its_runs_on_postgresql(team):
    url, env, folder = team
    solrl(env, "deploy", str(TINY), "--interval", "3600", "--run-dir", str(folder / "deployed"), "--name", NAME)
    query = ("select count(*) from flow_run r join deployment d on d.id = r.deployment_id "
             f"where d.name = '{NAME}' and r.state_type = 'SCHEDULED'")
    deadline = time.monotonic() + 120
    while _rows(f"{url}/prefect", query)[0][0] < 2:  # the server's scheduler, writing to PostgreSQL
        assert time.monotonic() < deadline, "the scheduler made no runs of the deployment"
        time.sleep(1)


def test_many_writers_at_once_meet_no_busy_database(team):
    """What SQLite serialises (and refuses past its busy timeout): 16 writers to each server at once."""
    import httpx
    from mlflow import MlflowClient

    url, env, _ = team
    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    run_id = client.create_run(client.create_experiment("pg-writers")).info.run_id
    api = env["PREFECT_API_URL"]

    def write(i: int) -> None:
        for step in range(5):
            client.log_metric(run_id, f"writer_{i}", float(step), step=step)
        with httpx.Client(base_url=api, timeout=60) as prefect:
            flow_id = prefect.post("/flows/", json={"name": f"writer-{i}"}).raise_for_status().json()["id"]
            for run in range(5):
                prefect.post("/flow_runs/", json={"flow_id": flow_id, "name": f"writer-{i}-{run}"}).raise_for_status()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(write, range(16)))
    assert _rows(f"{url}/mlflow", f"select count(*) from metrics where run_uuid = '{run_id}'")[0][0] == 16 * 5
    assert _rows(f"{url}/prefect", "select count(*) from flow_run where name like 'writer-%'")[0][0] == 16 * 5


def test_a_database_not_created_yet_is_said_before_either_server_starts(team, tmp_path, capsys, monkeypatch):
    from solrl.flows import mlflow_server, servers

    url, env, _ = team
    port = url.rsplit(":", 1)[1]
    monkeypatch.delenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", raising=False)
    for start in (lambda: servers.main(["prefect", "1", "--database", f"{url}/nothing_here"]),
                  lambda: mlflow_server.main(["1", f"{url}/nothing_here", str(tmp_path / "artifacts")])):
        with pytest.raises(SystemExit) as exited:
            start()
        assert exited.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("solrl: error: the ") and "'s database postgresql://***@127.0.0.1:" in line
        assert line.endswith(f'database "nothing_here" does not exist; create it: createdb -h 127.0.0.1 -p {port} '
                             "-U solrl nothing_here")
