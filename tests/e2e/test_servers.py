"""`make server`: the Prefect UI calls the API on the port the server was started on, not Prefect's default, and a
server given a database keeps its runs there (which database it is given: tests/unit/cli/test_server_database.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from cli_processes import free_port, sigint_as_at_a_terminal, start_prefect_server, stop
from repo_paths import ROOT
from solrl.flows.servers import DATABASE_URL_SETTINGS


@pytest.mark.e2e
def test_make_server_starts_prefect_through_flows_servers():
    port = free_port()
    plan = subprocess.run(["make", "-n", "server", f"PREFECT_PORT={port}", f"VENV={sys.prefix}"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert (f'{sys.prefix}/bin/python -m solrl.flows.servers prefect {port} --database "{ROOT}/.prefect/prefect.db" --host '
            '127.0.0.1 ') in plan
    assert "solrl.flows.mlflow_server" in plan and plan.count("--host 127.0.0.1") == 2
    assert "prefect server start" not in plan  # one command line, in flows/servers.py
    plan = subprocess.run(["make", "-n", "server", f"PREFECT_PORT={port}", f"VENV={sys.prefix}", "PREFECT_DB=/x/p.db"],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert f'solrl.flows.servers prefect {port} --database "/x/p.db" --host 127.0.0.1 ' in plan
    plan = subprocess.run(["make", "-n", "server", f"VENV={sys.prefix}", "SERVER_HOST=0.0.0.0",
                           "SERVER_FLAGS=--insecure"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert plan.count("--host 0.0.0.0 --insecure") == 2  # both servers; their health is asked of 127.0.0.1
    assert "http://127.0.0.1:4200/api/health" in plan


@pytest.mark.e2e
def test_a_server_given_a_database_keeps_its_runs_there(tmp_path):
    from solrl.flows.servers import start_prefect

    home, database = tmp_path / "home", tmp_path / "checkout" / ".prefect" / "prefect.db"
    env = {**os.environ, "PREFECT_HOME": str(home)}
    for name in ("PREFECT_API_URL", *DATABASE_URL_SETTINGS):
        env.pop(name, None)
    port = free_port()
    server = start_prefect(env, port, tmp_path / "server.log", ROOT, database=database)
    assert server is not None, (tmp_path / "server.log").read_text()
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/flows/", method="POST",
                                         data=json.dumps({"name": "kept-here"}).encode(),
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=30).close()
    finally:
        stop(server)
    assert database.is_file() and not (home / "prefect.db").exists()
    assert b"kept-here" in database.read_bytes() or any(  # SQLite may still hold the row in its write-ahead log
        b"kept-here" in p.read_bytes() for p in database.parent.glob("prefect.db-*"))
    assert f"Prefect database: {database}" in (tmp_path / "server.log").read_text()


@pytest.mark.e2e
def test_prefect_ui_calls_the_api_of_its_own_port(tmp_path):
    port = free_port()
    assert port != 4200
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_UI_API_URL", None)
    server = start_prefect_server(env, port, tmp_path / "server.log")
    base = f"http://127.0.0.1:{port}"
    try:
        settings = json.loads(urllib.request.urlopen(f"{base}/ui-settings", timeout=10).read())
        assert settings["api_url"] == f"{base}/api"
        # the page the browser loads comes from the same server
        page = urllib.request.urlopen(urllib.request.Request(base + "/", headers={"Accept": "text/html"}), timeout=10)
        assert "<html" in page.read().decode().lower()
    finally:
        stop(server)


@pytest.mark.e2e
def test_make_server_stops_both_servers_when_its_terminal_closes(tmp_path):
    """A closed terminal sends SIGHUP to the foreground process group: `make server`, its shell and both servers
    stop, nothing of it keeps running and neither port answers."""
    import signal
    import time

    prefect_port, mlflow_port = free_port(), free_port()
    log = tmp_path / "server.log"
    make = subprocess.Popen(
        ["make", "server", f"PREFECT_PORT={prefect_port}", f"MLFLOW_PORT={mlflow_port}", f"VENV={sys.prefix}",
         f"MLFLOW_STORE=sqlite:///{tmp_path}/mlruns.db", f"MLFLOW_ARTIFACTS={tmp_path}/artifacts",
         f"PREFECT_DB={tmp_path}/prefect.db"],
        cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,  # its own terminal's group
        preexec_fn=sigint_as_at_a_terminal)  # SIGHUP at its default, even in a suite started under nohup
    try:
        deadline = time.monotonic() + 240
        while "Ctrl-C stops both servers" not in log.read_text():
            assert make.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(1)
        os.killpg(make.pid, signal.SIGHUP)
        make.wait(timeout=120)
        deadline = time.monotonic() + 60
        while True:  # every process of the group gone
            try:
                os.killpg(make.pid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, "a process of make server's group still runs"
            time.sleep(1)
        for url in (f"http://127.0.0.1:{prefect_port}/api/health", f"http://127.0.0.1:{mlflow_port}/health"):
            with pytest.raises(OSError):
                urllib.request.urlopen(url, timeout=2)
    finally:
        try:
            os.killpg(make.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
