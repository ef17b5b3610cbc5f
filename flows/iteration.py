"""One RL iteration as a Prefect flow: `solrl_core.method.run_iteration` (the steps of solrl_core/method.py, in its
order) with a step runner that makes each step a Prefect task.

Each stage runs in this flow's process, or, when the config gives it a work pool (`orchestration.work_pools` /
`default_pool`), as a run of its stage deployment on that pool (flows/deploy.py) that this flow waits for. With
several devices a stage's model work runs on the run's device workers (tasks/dask_shards.py), the update's ranks included.
When the run's `audit.every` says so, the full-fidelity audit (the whole explore pool regenerated at full
precision) runs after score_final, in this process; nothing downstream reads it.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from solrl.flows.deploy import ensure_heartbeat_automation, ensure_stage_deployment, online_workers
from solrl.flows.progress import stage_done
from solrl_core.method import run_iteration
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import load_run_config
from solrl_core.run.staleness import is_current
from solrl.tasks.stage_task import AUDIT_TASK, STAGE_TASKS
from solrl.tasks.remote_stage import remote_stage_task
from solrl.tasks.dask_shards import dask_shards


def _deployment(stage: str, pool: str, heartbeat_timeout: int) -> str:
    ensure_heartbeat_automation(heartbeat_timeout)  # a stage run whose worker dies is marked Crashed, then re-run
    if not online_workers(pool):
        get_run_logger().warning("no worker polls work pool '%s': stage '%s' waits until one starts "
                                 "(prefect worker start --pool %s)", pool, stage, pool)
    return ensure_stage_deployment(stage, pool)


@flow(name="solrl-iteration", flow_run_name="iteration-{iteration}", log_prints=True)
def iteration_flow(run_dir: str, iteration: int, progress: bool = True) -> dict[str, dict]:
    """Run every stage of `iteration` in order; complete stages return their manifest at once (resume), unless they
    are stale (solrl_core/run/staleness.py): those are computed again."""
    run = RunDir(run_dir)
    cfg = load_run_config(run)
    with dask_shards() as shards:  # one Dask cluster (several devices): the training flow's, for the whole run

        def run_step(stage: str, iteration: int) -> dict:
            if stage == "update" and not shards.hosts_update(cfg):
                shards.close()  # torchrun runs the update: the workers free their devices for it
            task = STAGE_TASKS.get(stage, AUDIT_TASK)  # the audit runs in this process, whatever the pools
            pool = cfg.orchestration.pool_for(stage) if stage in STAGE_TASKS else None
            with stage_done(progress, stage, iteration, cfg.iterations):
                if pool and not is_current(run, iteration, stage):  # stale stages are computed again
                    return remote_stage_task(run_dir, stage, iteration,
                                             _deployment(stage, pool, cfg.orchestration.heartbeat_timeout))
                return task(run_dir, iteration, progress=progress)

        return run_iteration(cfg, iteration, run_step)
