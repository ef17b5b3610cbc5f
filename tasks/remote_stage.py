"""A stage run as a deployment run on its work pool: the iteration flow's Prefect task for stages that have a pool.

The task starts the stage's deployment run (linked to the iteration as a subflow), waits for it and returns the
stage's manifest from the run directory. A run that crashed (its process was killed, its machine lost) is retried:
Prefect runs the task again, which starts a new run of the stage, and the stage resumes from what it committed. When
the worker died with the process, nothing reports the crash: the server's heartbeat automation (flows/deploy.py)
marks the run Crashed once its heartbeats stopped for `orchestration.heartbeat_timeout` seconds, and it is retried
alike. A run that failed (the stage's own retries are spent, or a user error) or was cancelled is not retried. When
the task is stopped itself (its iteration flow cancelled or terminated), it cancels the stage run it waits for, so
that nothing goes on writing into the run directory.
"""

from __future__ import annotations

import time

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment
from prefect.states import Cancelling

from solrl_core.errors import SolrlError
from solrl_core.run.rundir import RunDir

POLL_SECONDS = 1.0  # how often the state of the stage run is read
CANCEL_WAIT_SECONDS = 25.0  # how long a stopped task waits for the stage run it cancelled to end
CRASH_RETRIES = 2


class StageRunCrashed(SolrlError):
    """The process running a stage died (killed, out of memory, machine lost); retried by Prefect."""


def _retry_if_crashed(task, task_run, state) -> bool:
    try:
        state.result()
    except StageRunCrashed:
        return True
    except BaseException:  # noqa: BLE001 - failed or cancelled stage runs are final
        return False
    return False


def _wait(flow_run_id, timeout: float | None = None):
    deadline = None if timeout is None else time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            flow_run = client.read_flow_run(flow_run_id)
            if flow_run.state is not None and flow_run.state.is_final():
                return flow_run
            if deadline is not None and time.monotonic() > deadline:
                return flow_run
            time.sleep(POLL_SECONDS)


def _cancel(flow_run_id, why: str) -> None:
    try:
        with get_client(sync_client=True) as client:
            flow_run = client.read_flow_run(flow_run_id)
            if flow_run.state is None or not flow_run.state.is_final():
                client.set_flow_run_state(flow_run_id, Cancelling(message=why))
        _wait(flow_run_id, timeout=CANCEL_WAIT_SECONDS)
    except Exception as exc:  # noqa: BLE001 - best effort while being stopped; the server also cancels subflows
        get_run_logger().warning("could not cancel stage run %s: %s", flow_run_id, exc)


def _task_run_name() -> str:
    from prefect.runtime import task_run

    p = task_run.parameters
    return f"{p['stage']}-it{p['iteration']}@{p['deployment'].rsplit('@', 1)[-1]}"  # e.g. explore-it0@explore-pool


@task(
    name="remote-stage",
    task_run_name=_task_run_name,
    retries=CRASH_RETRIES,
    retry_delay_seconds=1,
    retry_condition_fn=_retry_if_crashed,
    cache_policy=NO_CACHE,
    persist_result=False,
)
def remote_stage_task(run_dir: str, stage: str, iteration: int, deployment: str) -> dict:
    """Run `stage` of `iteration` as a run of `deployment` (`solrl-stage/<stage>@<pool>`); return its manifest."""
    flow_run = run_deployment(
        deployment,
        parameters={"run_dir": run_dir, "stage": stage, "iteration": iteration, "hold": False, "progress": False},
        flow_run_name=f"{stage}-it{iteration}",
        timeout=0,
    )
    try:
        flow_run = _wait(flow_run.id)
    except BaseException:
        _cancel(flow_run.id, f"its iteration flow stopped while {stage} of iteration {iteration} ran")
        raise
    state = flow_run.state
    where = f"stage '{stage}' of iteration {iteration} on work pool '{flow_run.work_pool_name}' " \
            f"(flow run '{flow_run.name}', {flow_run.id})"
    if state.is_completed():
        return RunDir(run_dir).manifest(iteration, stage)
    if state.is_crashed():
        raise StageRunCrashed(f"{where} crashed: {state.message}")
    if state.is_cancelled():
        raise SolrlError(f"{where} was cancelled; run the same command again to resume")
    raise SolrlError(f"{where} ended {state.name}: {state.message} (its logs are in the Prefect UI); fix the cause "
                     "and run the same command again to resume")
