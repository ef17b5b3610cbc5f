"""One stage of one iteration as its own flow (what `solrl stage` runs, and what a deployment can run alone)."""

from __future__ import annotations

from prefect import flow

from tasks.registry import STAGE_TASKS


@flow(name="solrl-stage", flow_run_name="{stage}-it{iteration}")
def stage_flow(run_dir: str, stage: str, iteration: int, force: bool = False, progress: bool = True) -> dict:
    return STAGE_TASKS[stage](run_dir, iteration, force=force, progress=progress)
