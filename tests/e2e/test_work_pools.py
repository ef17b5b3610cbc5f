"""Stages on work pools: two process pools with one worker each; an iteration whose explore runs on one pool and
update on the other, seen through the Prefect API; a stage deployment run alone, as `solrl stage` runs it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from prefect.deployments import run_deployment

from cli_processes import SMALLER_RUN, tracking_set
from repo_paths import TINY
from solrl_core.config.loading import load_config
from prefect_workers import api, deployment_runs, process_workers
from solrl_core.run.pool import read_table
from solrl_core.run.rundir import STAGES

EXPLORE_POOL, TRAIN_POOL = "wp-explore", "wp-train"
POOLS = {"explore": EXPLORE_POOL, "update": TRAIN_POOL}


@pytest.fixture(scope="module")
def workers(session_env, tmp_path_factory):
    with process_workers(session_env, [EXPLORE_POOL, TRAIN_POOL], tmp_path_factory.mktemp("workers")) as procs:
        yield procs


def test_iteration_runs_its_stages_on_their_pools(run_cli, session_env, workers, tmp_path):
    run_dir = tmp_path / "pools"
    mapping = "{" + ", ".join(f"{s}: {p}" for s, p in POOLS.items()) + "}"
    run_cli("train", str(TINY), *SMALLER_RUN, "--iterations", "1", "--run-dir", str(run_dir), "--no-progress",
            "--set", f"orchestration.work_pools={mapping}", *tracking_set(session_env))

    status = json.loads(run_cli("status", "--run-dir", str(run_dir), "--json").stdout)
    assert status["iterations"][0]["stages"] == {s: "complete" for s in STAGES}
    pool, attrs = read_table(run_dir / "iter_0000" / "explore" / "pool.zarr", ["seed"])
    cfg = load_config(run_dir / "config.yaml")
    candidates = cfg.prompts.per_iteration * cfg.explore.seeds_per_prompt
    assert attrs["committed"] == attrs["n_rows"] == candidates and (pool["seed"] >= 0).all()
    assert (run_dir / "iter_0000" / "update" / "checkpoint" / "adapters.safetensors").is_file()

    # through the API: exactly one completed run per pooled stage, on its pool, linked to this run's iteration flow
    parents = set()
    for stage in STAGES:
        pool = POOLS.get(stage)
        runs = deployment_runs(session_env, f"solrl-stage/{stage}@{pool}", run_dir) if pool else []
        if pool is None:
            continue
        assert len(runs) == 1, f"{stage}: {[(r.name, r.state_name) for r in runs]}"
        (fr,) = runs
        assert fr.state.is_completed() and fr.work_pool_name == pool
        assert fr.parameters["stage"] == stage and fr.parameters["iteration"] == 0
        with api(session_env) as client:
            parents.add(client.read_task_run(fr.parent_task_run_id).flow_run_id)
    with api(session_env) as client:
        (iteration_run,) = [client.read_flow_run(p) for p in parents]
    assert iteration_run.name == "iteration-0" and iteration_run.state.is_completed()
    # the other stages ran in the iteration flow's process: no deployment runs for them
    for stage in set(STAGES) - set(POOLS):
        for pool in (EXPLORE_POOL, TRAIN_POOL):
            assert not deployment_runs(session_env, f"solrl-stage/{stage}@{pool}", run_dir)

    # a stage deployment run alone behaves as `solrl stage`: --force recomputes explore, with the same pool
    before, _ = read_table(run_dir / "iter_0000" / "explore" / "pool.zarr")
    with api(session_env):
        fr = run_deployment(f"solrl-stage/explore@{EXPLORE_POOL}", poll_interval=1, timeout=600,
                            parameters={"run_dir": str(run_dir), "iteration": 0, "force": True})
    assert fr.state.is_completed(), fr.state
    assert fr.parameters["hold"] is True  # alone, it holds the run directory as `solrl stage` does
    after, _ = read_table(run_dir / "iter_0000" / "explore" / "pool.zarr")
    for key in before:
        np.testing.assert_array_equal(before[key], after[key], err_msg=key)
