"""Prefect task of the full-fidelity audit (the whole explore pool regenerated at full precision)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from solrl_core.rundir import RunDir
from solrl_core.runs import load_run_config
from solrl_core.stages.audit import audit_iteration
from tasks.stage_task import _retry_unless_user_error


@task(
    name="audit",
    task_run_name="audit-it{iteration}",
    retries=1,
    retry_delay_seconds=1,
    retry_condition_fn=_retry_unless_user_error,
    cache_policy=NO_CACHE,
    persist_result=False,
)
def audit_task(run_dir: str, iteration: int, force: bool = False, progress: bool = True) -> dict:
    """Audit one iteration (skipped when `manifests/audit.json` exists); returns the audit manifest."""
    run = RunDir(run_dir)
    return audit_iteration(run, load_run_config(run), iteration, force=force, progress=progress)
