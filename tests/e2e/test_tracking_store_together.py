"""Runs started together on a new sqlite tracking store (a sweep launched from a fresh checkout) share it safely:
its schema and experiment are made by one of them while the others wait (flows/tracking.py `store_lock`); without
it, MLflow's schema migrations, run at once, fail."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from repo_paths import ROOT, TINY

STARTERS = 3
MAKE_RUN = """
import pathlib, sys, time
from solrl.flows.tracking import ensure_mlflow_run
from solrl_core.config.loading import load_config
from solrl_core.run.rundir import RunDir
go = pathlib.Path(sys.argv[1])
pathlib.Path(sys.argv[4] + ".ready").touch()  # imported: waiting for the others
while not go.exists():
    time.sleep(0.01)
cfg = load_config(sys.argv[2], [f"tracking.uri={sys.argv[3]}", "tracking.experiment=together"])
print(ensure_mlflow_run(RunDir(sys.argv[4]), cfg)["mlflow_run_id"])
"""


@pytest.mark.e2e  # starts processes
def test_runs_started_together_share_a_new_store(tmp_path):
    import mlflow

    store, go = f"sqlite:///{tmp_path}/mlruns.db", tmp_path / "go"
    starters = [subprocess.Popen([sys.executable, "-c", MAKE_RUN, str(go), str(TINY), store, str(tmp_path / f"r{i}")],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(STARTERS)]
    ready = [tmp_path / f"r{i}.ready" for i in range(STARTERS)]
    deadline = time.monotonic() + 300
    while not all(r.exists() for r in ready):  # all imported and waiting
        assert all(p.poll() is None for p in starters) and time.monotonic() < deadline, \
            [p.communicate()[1][-1500:] for p in starters if p.poll() is not None]
        time.sleep(0.05)
    go.touch()
    results = [p.communicate(timeout=300) for p in starters]
    assert [p.returncode for p in starters] == [0] * STARTERS, [err[-1500:] for _, err in results]
    made = {out.strip() for out, _ in results}
    client = mlflow.MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("together")
    assert {r.info.run_id for r in client.search_runs([experiment.experiment_id])} == made and len(made) == STARTERS
