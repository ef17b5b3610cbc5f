"""What `solrl train` refuses in one line before any work (flows/service_checks.py), through the CLI: exit 2, one line,
nothing written. The checks themselves, in process: tests/unit/cli/test_preflight_gaps.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from repo_paths import ROOT, TINY


# ---- through the CLI: exit 2, one line, nothing written -------------------------------------------------------------
@pytest.mark.e2e  # starts `solrl train`
@pytest.mark.parametrize("env, sets, says", [
    ({"PREFECT_API_URL": "notaurl"}, [], "PREFECT_API_URL=notaurl is not an http(s) URL"),
    ({}, ["--set", "tracking.uri=foo://x"], "tracking.uri = foo://x: MLflow has no tracking store for 'foo:' URIs"),
])
def test_train_refuses_before_any_work(tmp_path, env, sets, says):
    run_dir = tmp_path / "run"
    base = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI")}
    done = subprocess.run([sys.executable, "-m", "solrl", "train", str(TINY), "--iterations", "1", "--run-dir",
                           str(run_dir), *sets], cwd=ROOT, env={**base, **env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and says in done.stderr, done.stderr
    assert not run_dir.exists()
