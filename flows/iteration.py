"""One RL iteration as a Prefect flow: quantize → explore → score → select → regenerate → score → update.

When the run's `audit.every` says so, the full-fidelity audit (the whole explore pool regenerated at full
precision) runs after score_final; nothing downstream reads it.
"""

from __future__ import annotations

from prefect import flow

from solrl_core.rundir import RunDir
from solrl_core.runs import load_run_config
from solrl_core.stages.audit import AUDIT, audit_due
from tasks.audit import audit_task
from tasks.registry import STAGE_TASKS


@flow(name="solrl-iteration", flow_run_name="iteration-{iteration}", log_prints=True)
def iteration_flow(run_dir: str, iteration: int, progress: bool = True) -> dict[str, dict]:
    """Run every stage of `iteration` in order; complete stages return their manifest at once (resume)."""
    audit = audit_due(load_run_config(RunDir(run_dir)), iteration)
    manifests = {}
    for stage, stage_task in STAGE_TASKS.items():
        manifests[stage] = stage_task(run_dir, iteration, progress=progress)
        if stage == "score_final" and audit:
            manifests[AUDIT] = audit_task(run_dir, iteration, progress=progress)
    return manifests
