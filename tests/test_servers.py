"""`make server`: the Prefect UI calls the API on the port the server was started on, not Prefect's default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from conftest import ROOT, free_port, start_prefect_server, stop


@pytest.mark.e2e
def test_make_server_starts_prefect_through_flows_servers():
    port = free_port()
    plan = subprocess.run(["make", "-n", "server", f"PREFECT_PORT={port}", f"VENV={sys.prefix}"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert f"{sys.prefix}/bin/python -m flows.servers prefect {port} &" in plan
    assert "prefect server start" not in plan  # one command line, in flows/servers.py


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
