"""One RL iteration as a Prefect flow: quantize → explore → score → select → regenerate → score → update."""

from __future__ import annotations

from prefect import flow

from tasks.registry import STAGE_TASKS


@flow(name="solrl-iteration", flow_run_name="iteration-{iteration}", log_prints=True)
def iteration_flow(run_dir: str, iteration: int, progress: bool = True) -> dict[str, dict]:
    """Run every stage of `iteration` in order; complete stages return their manifest at once (resume)."""
    return {
        stage: stage_task(run_dir, iteration, progress=progress) for stage, stage_task in STAGE_TASKS.items()
    }
