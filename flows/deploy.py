"""Prefect deployments of solrl's flows and the process work pools they run on.

Deployments (`flow name/deployment name`):
    solrl-train-config/<name>     the training flow of one config (carried as its resolved YAML, so a worker needs
                                  no file of it) + run directory + overrides, as `solrl train` runs it (name: the
                                  config's `name`, or `solrl deploy --name`); may carry a schedule
    solrl-stage/<stage>@<pool>    one stage on one work pool, as `solrl stage` runs it (parameters run_dir, iteration;
                                  the stage is a default parameter); the iteration flow runs these for stages that
                                  have a pool (`orchestration.work_pools`)

Workers import the flows from the installed solrl package: entrypoints are module paths (`solrl.flows.stage.stage_flow`),
with no pull step, no image and no git remote, so a process worker started in any directory of any machine where
solrl is installed runs them. A flow run works in the directory its worker was started in (job variable
`working_dir: .`): relative paths in a config (prompt files, model paths, the default MLflow store) resolve there, as
they resolve in the directory where `solrl train` runs.

Lost workers: the flow-run processes of these deployments send a Prefect heartbeat event every HEARTBEAT_SECONDS, and
the automation HEARTBEAT_AUTOMATION (made by `solrl deploy` and by the iteration flow before it starts a stage run)
marks a run of a solrl deployment Crashed when no heartbeat (nor end state) came for `orchestration.heartbeat_timeout`
seconds: its worker, or the worker's machine, died with it. The iteration flow re-runs a crashed stage.
"""

from __future__ import annotations

import functools
import importlib
import shlex
from datetime import timedelta
from pathlib import Path

from prefect import Flow
from prefect.deployments.runner import EntrypointType
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.client.schemas.filters import WorkerFilter, WorkerFilterStatus
from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
from prefect.exceptions import ObjectNotFound

from solrl.flows.service_checks import MLFLOW_HTTP_DEFAULTS
from solrl_core.config.schema import RunConfig
from solrl_core.errors import SolrlError
from solrl_core.run.rundir import STAGES

TRAIN_FLOW = "solrl-train-config"
STAGE_FLOW = "solrl-stage"
TRAIN_ENTRYPOINT = "solrl.flows.training.train_config_flow"  # module paths: imported from the installed package
STAGE_ENTRYPOINT = "solrl.flows.stage.stage_flow"
WORK_POOL_TYPE = "process"
TAG = "solrl"  # every solrl deployment, so every run of one, carries it
HEARTBEAT_SECONDS = 30  # Prefect's shortest flow-run heartbeat interval (its default is 180)
HEARTBEAT_AUTOMATION = "solrl: crash flow runs without heartbeat"
# The flow-run processes a worker starts: what the CLI sets for itself before torch loads (idle OpenMP threads that
# spin stall badly on shared cores), quiet library logs, heartbeats often enough for HEARTBEAT_AUTOMATION, bounded
# MLflow retries.
FLOW_RUN_ENV = {
    "OMP_WAIT_POLICY": "PASSIVE",
    "DIFFUSERS_VERBOSITY": "error",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_SECONDS),
    **MLFLOW_HTTP_DEFAULTS,  # a dead MLflow server fails the run in about a minute, not after minutes of retries
}
# Job variables of every solrl deployment: the environment above, and the worker's own directory as the flow run's
# working directory (a process worker's default is a new temporary directory per run).
JOB_VARIABLES = {"env": FLOW_RUN_ENV, "working_dir": "."}


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


def heartbeat_automation(timeout: float) -> AutomationCore:
    """The automation that marks a run of a solrl deployment Crashed after `timeout` seconds without a heartbeat.

    A proactive trigger per flow run: after its Pending or Running state or a heartbeat, it expects another heartbeat
    (or Running, or an end state) within `timeout` seconds; when none comes, the run's process is gone.
    """
    run_event = "prefect.flow-run."
    return AutomationCore(
        name=HEARTBEAT_AUTOMATION,
        description=f"A run of a '{TAG}'-tagged deployment whose process sent no heartbeat for {timeout:g} s (its "
                    "worker or machine died) is marked Crashed, so that the iteration flow waiting for it re-runs it.",
        trigger=EventTrigger(
            posture=Posture.Proactive,
            match={"prefect.resource.id": f"{run_event}*"},
            match_related={"prefect.resource.role": "tag", "prefect.resource.id": f"prefect.tag.{TAG}"},
            for_each={"prefect.resource.id"},
            after={run_event + e for e in ("Pending", "Running", "heartbeat")},
            expect={run_event + e for e in ("Running", "heartbeat", "Completed", "Failed", "Cancelled", "Crashed")},
            threshold=1,
            within=timedelta(seconds=timeout),
        ),
        actions=[ChangeFlowRunState(
            state=StateType.CRASHED,
            message=f"no heartbeat for {timeout:g} s: the worker running it, or its machine, was lost",
        )],
    )


@functools.cache
def ensure_heartbeat_automation(timeout: float) -> str:
    """Create HEARTBEAT_AUTOMATION, or update it when it differs; 'created', 'updated' or 'unchanged'.

    One per Prefect server: the last config deployed or run sets its timeout. Left alone when it is as wanted, since
    an update restarts the server's tracking of the runs it watches."""
    wanted = heartbeat_automation(timeout)
    fields = {"description", "enabled", "trigger", "actions"}
    with get_client(sync_client=True) as client:
        found = client.read_automations_by_name(HEARTBEAT_AUTOMATION)
        if not found:
            client.create_automation(wanted)
            return "created"
        current = found[0]
        if current.model_dump(include=fields, exclude={"trigger": {"id"}}) == \
                wanted.model_dump(include=fields, exclude={"trigger": {"id"}}):  # python mode: sets stay sets
            return "unchanged"
        client.update_automation(current.id, wanted)
        return "updated"


def _load(entrypoint: str) -> Flow:
    """The flow at a module-path entrypoint (imported here: solrl.flows.training imports this module)."""
    module, name = entrypoint.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def deploy_stage(stage: str, pool: str) -> str:
    """Create or update the deployment of `stage` on `pool`; return its `flow/deployment` name."""
    if stage not in STAGES:
        raise SolrlError(f"unknown stage '{stage}' (stages: {', '.join(STAGES)})")
    deployment = _load(STAGE_ENTRYPOINT).to_deployment(
        name=stage_deployment_name(stage, pool),
        parameters={"stage": stage, "hold": True, "progress": False},
        job_variables=JOB_VARIABLES,
        entrypoint_type=EntrypointType.MODULE_PATH,
        description=f"The '{stage}' stage of one iteration on work pool '{pool}', as `solrl stage {stage}` runs it: "
                    "skipped when complete (force=true to redo), refused when its inputs are missing.",
        tags=[TAG, f"stage:{stage}"],
    )
    deployment.apply(work_pool_name=pool)
    return stage_deployment(stage, pool)


@functools.cache
def ensure_stage_deployment(stage: str, pool: str) -> str:
    """`deploy_stage` once per process (the iteration flow calls this before each remote stage)."""
    return deploy_stage(stage, pool)


def train_command(config: Path, run_dir: Path, overrides: list[str]) -> str:
    """The `solrl train` command line a run of the training deployment is equivalent to (a packaged config by its
    name)."""
    from solrl_core.config.sources import packaged_name

    return shlex.join(["solrl", "train", packaged_name(config) or str(config), "--run-dir", str(run_dir),
                       *[arg for o in overrides for arg in ("--set", o)]])


def deploy_training(config: Path, run_dir: Path, overrides: list[str], name: str, pool: str,
                    cron: str | None = None, interval: float | None = None) -> str:
    """Create or update the training deployment; its schedule becomes exactly `cron` / `interval` (or none). The
    deployment carries the config resolved (YAML text, as `solrl config --show` prints it; the overrides stay a
    parameter of their own), so a worker on any machine runs it without a copy of the file or of its `extends`."""
    from solrl_core.config.schema import dump_config
    from solrl_core.config.loading import load_config

    deployment = _load(TRAIN_ENTRYPOINT).to_deployment(
        name=name,
        parameters={"config": dump_config(load_config(config)), "run_dir": str(run_dir), "overrides": list(overrides),
                    "progress": False},
        cron=cron,
        interval=interval,
        concurrency_limit=1,  # a firing while the previous run still trains waits for it
        job_variables=JOB_VARIABLES,
        entrypoint_type=EntrypointType.MODULE_PATH,
        description=train_command(config, run_dir, overrides),
        tags=[TAG, "train"],
    )
    deployment_id = deployment.apply(work_pool_name=pool)
    if cron is None and interval is None:
        with get_client(sync_client=True) as client:
            for schedule in client.read_deployment_schedules(deployment_id):
                client.delete_deployment_schedule(deployment_id, schedule.id)
    return f"{TRAIN_FLOW}/{name}"


def check_tracking_uri(cfg: RunConfig, run_dir) -> str:
    """Before anything is registered: the MLflow store the training deployment will log to (run.json's when the run
    directory has one) answers, and, when its experiment or run keeps artifacts on a server (proxied), is reached
    through that server; a one-line SolrlError otherwise. Returns the URI logged to."""
    from solrl.flows.service_checks import check_tracking
    from solrl_core.run.rundir import RunDir

    return check_tracking(cfg, RunDir(run_dir))


def deploy_all(cfg: RunConfig, config: Path, run_dir: Path, overrides: list[str], name: str | None = None,
               cron: str | None = None, interval: float | None = None) -> dict:
    """Work pools (created when missing), the training deployment and one deployment per stage."""
    check_tracking_uri(cfg, run_dir)
    orch = cfg.orchestration
    stage_pools = {stage: orch.pool_for(stage) or orch.flow_pool for stage in STAGES}
    pools = list(dict.fromkeys([orch.flow_pool, *stage_pools.values()]))
    created = [pool for pool in pools if ensure_work_pool(pool)]
    train = deploy_training(config, run_dir, overrides, name or cfg.name, orch.flow_pool, cron, interval)
    stages = {stage: deploy_stage(stage, pool) for stage, pool in stage_pools.items()}
    automation = ensure_heartbeat_automation(orch.heartbeat_timeout)
    return {"training": train, "training_pool": orch.flow_pool, "stages": stages, "stage_pools": stage_pools,
            "pools": pools, "created_pools": created,
            "heartbeat_automation": {"name": HEARTBEAT_AUTOMATION, "timeout": orch.heartbeat_timeout,
                                     "status": automation},
            "workers": {pool: online_workers(pool) for pool in pools}}
