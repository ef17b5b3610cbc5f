"""Prefect task of the held-out evaluation (EMA weights, fixed prompts and seeds)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from solrl_core.evaluate import run_eval
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import load_run_config
from solrl_core.run.storage import is_remote
from solrl_core.userfiles import user_os_errors
from solrl.tasks.dask_shards import dask_shards


@task(name="evaluate", task_run_name="evaluate-step{step}", retries=1, cache_policy=NO_CACHE, persist_result=False)
def evaluate_task(run_dir: str, step: int, progress: bool = True) -> dict:
    """Evaluate the policy after `step` iterations (stored once in <run>/eval/step_NNNN/), split over the devices."""
    run = RunDir(run_dir)
    with user_os_errors(f"evaluation after {step} iterations", folder=None if is_remote(run.root) else run.root), \
            dask_shards():
        return run_eval(run, load_run_config(run), step, progress=progress)
