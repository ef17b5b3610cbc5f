"""Shards of a sampling stage (solrl_core/stages/shards.py) as Prefect tasks on a Dask cluster of processes.

The stage's task runs a `solrl-shards` subflow with prefect-dask's DaskTaskRunner on a temporary
`distributed.LocalCluster` (one single-threaded worker process per shard, bound to 127.0.0.1): one task prepares
the pool on a worker (so the stage's own process never loads the model), then one task per shard samples its
batches. Each task rebuilds its stage context from the run directory. A failed shard task is retried once, and a
failed subflow fails the stage task, which Prefect retries: every attempt resumes at the batches not done yet.
"""

from __future__ import annotations

from dataclasses import asdict

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from solrl_core.rundir import RunDir
from solrl_core.runs import load_run_config
from solrl_core.stages.context import StageContext
from solrl_core.stages.shards import SHARDED_STAGES, Shard, prepare_shards, run_shard
from solrl_core.storage import location
from tasks.stage_task import _retry_unless_user_error

_TASK = {"retries": 1, "retry_delay_seconds": 1, "retry_condition_fn": _retry_unless_user_error,
         "cache_policy": NO_CACHE, "persist_result": False}


def _context(run_dir: str, iteration: int) -> StageContext:
    run = RunDir(run_dir)
    return StageContext(run, load_run_config(run), iteration, progress=False)


@task(name="prepare-shards", task_run_name="{stage}-it{iteration}-prepare", **_TASK)
def prepare_shards_task(run_dir: str, iteration: int, stage: str) -> None:
    prepare_shards(_context(run_dir, iteration), stage)


@task(name="shard", task_run_name="{stage}-it{iteration}-shard{index}", **_TASK)
def shard_task(run_dir: str, iteration: int, stage: str, index: int, first_batch: int, stop_batch: int) -> dict:
    return run_shard(_context(run_dir, iteration), stage, Shard(index, first_batch, stop_batch))


@flow(name="solrl-shards", flow_run_name="{stage}-it{iteration}-shards")
def shards_flow(run_dir: str, iteration: int, stage: str, shards: list[dict]) -> list[dict]:
    """Prepare the stage's pool, then sample every shard at once on the flow's task runner."""
    prepare_shards_task.submit(run_dir, iteration, stage).result()
    futures = [shard_task.submit(run_dir, iteration, stage, **shard) for shard in shards]
    return [future.result() for future in futures]


def run_shards_on_dask(ctx: StageContext, stage: str, shards: list[Shard]) -> list[dict]:
    """The ShardRunner of the Prefect stage tasks: `shards_flow` on a local Dask cluster of len(shards) processes."""
    from prefect_dask import DaskTaskRunner

    runner = DaskTaskRunner(cluster_kwargs={
        "n_workers": len(shards), "processes": True, "threads_per_worker": 1,
        "host": "127.0.0.1", "dashboard_address": "127.0.0.1:0",  # loopback only, any free port
        "preload": [__name__, SHARDED_STAGES[stage]],  # every worker imports the stage while the others start
    })
    return shards_flow.with_options(task_runner=runner)(location(ctx.run.root), ctx.iteration, stage,
                                                 [asdict(shard) for shard in shards])
