"""`solrl deploy` without a Prefect server configured: one line, exit 2 (deployments on a server:
tests/e2e/test_deploy.py)."""

from __future__ import annotations


from prefect.settings import PREFECT_API_URL, temporary_settings

from repo_paths import TINY
from solrl.cli.main import main

def test_deploy_needs_a_prefect_server(capsys):
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert main(["deploy", str(TINY), "--interval", "60"]) == 2
    assert "no Prefect server configured" in capsys.readouterr().err
