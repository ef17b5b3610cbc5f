"""Prefect deployments of solrl's flows and the process work pools they run on.

Deployments (`flow name/deployment name`):
    solrl-train-config/<name>     the training flow of one config file + run directory + overrides, as `solrl train`
                                  runs it (name: the config's `name`, or `solrl deploy --name`); may carry a schedule
    solrl-stage/<stage>@<pool>    one stage on one work pool, as `solrl stage` runs it (parameters run_dir, iteration;
                                  the stage is a default parameter); the iteration flow runs these for stages that
                                  have a pool (`orchestration.work_pools`)

Workers load the flows from this checkout: entrypoints are file paths inside it and each run's working directory is
the checkout, so a process worker on this machine needs no image and no git remote.
"""

from __future__ import annotations

import functools
import shlex
from pathlib import Path

from prefect import Flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.client.schemas.filters import WorkerFilter, WorkerFilterStatus
from prefect.exceptions import ObjectNotFound

from solrl_core.config import RunConfig
from solrl_core.errors import SolrlError
from solrl_core.rundir import STAGES

REPO_DIR = Path(__file__).resolve().parents[1]
TRAIN_FLOW = "solrl-train-config"
STAGE_FLOW = "solrl-stage"
TRAIN_ENTRYPOINT = "flows/training.py:train_config_flow"
STAGE_ENTRYPOINT = "flows/stage.py:stage_flow"
WORK_POOL_TYPE = "process"
# The flow-run processes a worker starts: what the CLI sets for itself before torch loads (idle OpenMP threads that
# spin stall badly on shared cores) and quiet library logs.
FLOW_RUN_ENV = {
    "OMP_WAIT_POLICY": "PASSIVE",
    "DIFFUSERS_VERBOSITY": "error",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}


def require_api() -> str:
    """The configured Prefect API URL; a one-line error when none is set or it does not answer."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise SolrlError("no Prefect server configured: start one (make server) and "
                         "export PREFECT_API_URL=http://127.0.0.1:4200/api")
    with get_client(sync_client=True) as client:
        failure = client.api_healthcheck()
    if failure is not None:
        raise SolrlError(f"the Prefect API at {url} does not answer ({type(failure).__name__}); start the server "
                         "(make server) or fix PREFECT_API_URL")
    return url


def check_schedule(cron: str | None, interval: float | None) -> None:
    if cron is not None and interval is not None:
        raise SolrlError("give --cron or --interval, not both")
    if interval is not None and interval <= 0:
        raise SolrlError(f"--interval must be a positive number of seconds, got {interval}")
    if cron is not None:
        from prefect.client.schemas.schedules import CronSchedule

        try:
            CronSchedule(cron=cron)
        except ValueError:
            raise SolrlError(f"--cron '{cron}' is not a valid cron expression (e.g. '0 3 * * *': daily at 03:00)") \
                from None


def stage_deployment_name(stage: str, pool: str) -> str:
    return f"{stage}@{pool}"


def stage_deployment(stage: str, pool: str) -> str:
    """The `flow/deployment` name run_deployment takes for `stage` on `pool`."""
    return f"{STAGE_FLOW}/{stage_deployment_name(stage, pool)}"


def ensure_work_pool(name: str) -> bool:
    """Create the process work pool `name` unless it exists; True when it was created."""
    from prefect.workers.process import ProcessWorker

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(name)
            return False
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(
                name=name, type=WORK_POOL_TYPE, base_job_template=ProcessWorker.get_default_base_job_template(),
            ))
            return True


def online_workers(pool: str) -> int:
    """Workers polling `pool` now; raises a one-line error when the pool does not exist."""
    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(pool)
        except ObjectNotFound:
            raise SolrlError(
                f"work pool '{pool}' does not exist: create it with `solrl deploy CONFIG` (or `prefect work-pool "
                f"create {pool} --type process`) and start a worker: prefect worker start --pool {pool}"
            ) from None
        return len(client.read_workers_for_work_pool(
            pool, worker_filter=WorkerFilter(status=WorkerFilterStatus(any_=["ONLINE"])), offset=0, limit=200,
        ))


def _load(entrypoint: str) -> Flow:
    return Flow.from_source(source=str(REPO_DIR), entrypoint=entrypoint)


def deploy_stage(stage: str, pool: str) -> str:
    """Create or update the deployment of `stage` on `pool`; return its `flow/deployment` name."""
    if stage not in STAGES:
        raise SolrlError(f"unknown stage '{stage}' (stages: {', '.join(STAGES)})")
    deployment = _load(STAGE_ENTRYPOINT).to_deployment(
        name=stage_deployment_name(stage, pool),
        parameters={"stage": stage, "hold": True, "progress": False},
        job_variables={"env": FLOW_RUN_ENV},
        description=f"The '{stage}' stage of one iteration on work pool '{pool}', as `solrl stage {stage}` runs it: "
                    "skipped when complete (force=true to redo), refused when its inputs are missing.",
        tags=["solrl", f"stage:{stage}"],
    )
    deployment.apply(work_pool_name=pool)
    return stage_deployment(stage, pool)


@functools.cache
def ensure_stage_deployment(stage: str, pool: str) -> str:
    """`deploy_stage` once per process (the iteration flow calls this before each remote stage)."""
    return deploy_stage(stage, pool)


def train_command(config: Path, run_dir: Path, overrides: list[str]) -> str:
    """The `solrl train` command line a run of the training deployment is equivalent to."""
    return shlex.join(["solrl", "train", str(config), "--run-dir", str(run_dir),
                       *[arg for o in overrides for arg in ("--set", o)]])


def deploy_training(config: Path, run_dir: Path, overrides: list[str], name: str, pool: str,
                    cron: str | None = None, interval: float | None = None) -> str:
    """Create or update the training deployment; its schedule becomes exactly `cron` / `interval` (or none)."""
    deployment = _load(TRAIN_ENTRYPOINT).to_deployment(
        name=name,
        parameters={"config": str(config), "run_dir": str(run_dir), "overrides": list(overrides), "progress": False},
        cron=cron,
        interval=interval,
        concurrency_limit=1,  # a firing while the previous run still trains waits for it
        job_variables={"env": FLOW_RUN_ENV},
        description=train_command(config, run_dir, overrides),
        tags=["solrl", "train"],
    )
    deployment_id = deployment.apply(work_pool_name=pool)
    if cron is None and interval is None:
        with get_client(sync_client=True) as client:
            for schedule in client.read_deployment_schedules(deployment_id):
                client.delete_deployment_schedule(deployment_id, schedule.id)
    return f"{TRAIN_FLOW}/{name}"


def deploy_all(cfg: RunConfig, config: Path, run_dir: Path, overrides: list[str], name: str | None = None,
               cron: str | None = None, interval: float | None = None) -> dict:
    """Work pools (created when missing), the training deployment and one deployment per stage."""
    orch = cfg.orchestration
    stage_pools = {stage: orch.pool_for(stage) or orch.flow_pool for stage in STAGES}
    pools = list(dict.fromkeys([orch.flow_pool, *stage_pools.values()]))
    created = [pool for pool in pools if ensure_work_pool(pool)]
    train = deploy_training(config, run_dir, overrides, name or cfg.name, orch.flow_pool, cron, interval)
    stages = {stage: deploy_stage(stage, pool) for stage, pool in stage_pools.items()}
    return {"training": train, "training_pool": orch.flow_pool, "stages": stages, "stage_pools": stage_pools,
            "pools": pools, "created_pools": created,
            "workers": {pool: online_workers(pool) for pool in pools}}
