"""One stage of one iteration as its own flow (what `solrl stage` runs, and what a stage deployment runs)."""

from __future__ import annotations

from prefect import flow

from solrl.flows.progress import stage_done

from solrl_core.errors import SolrlError
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import check_iteration, load_run_config
from solrl_core.run.storage import lock_wait_seconds
from solrl.tasks.stage_task import STAGE_TASKS


@flow(name="solrl-stage", flow_run_name="{stage}-it{iteration}")
def stage_flow(run_dir: str, stage: str, iteration: int, force: bool = False, progress: bool = True,
               hold: bool = False) -> dict:
    """Run `stage` of `iteration` (skipped when complete and not stale, unless `force`; refused when its inputs are
    missing or stale).

    Args:
        run_dir: the run directory (made by `solrl train`)
        stage: quantize, explore, score_explore, select, regenerate, score_final or update
        iteration: iteration number, from 0
        force: compute the stage again (its artifact stays until the new one is complete)
        progress: progress bars
        hold: take the run directory's lock for the stage, as `solrl stage` does (stage deployments default to
            true), waiting for another holder up to SOLRL_LOCK_WAIT seconds (default 600); false when the caller
            already holds it (`solrl stage`, the iteration flow that started it)
    """
    if stage not in STAGE_TASKS:
        raise SolrlError(f"unknown stage '{stage}' (stages: {', '.join(STAGE_TASKS)})")
    # a path that is not a run directory, an iteration the run does not have: one line saying so, as `solrl stage`
    check_iteration(load_run_config(RunDir(run_dir)), iteration, flag="iteration")
    with stage_done(progress, stage, iteration):
        if not hold:
            return STAGE_TASKS[stage](run_dir, iteration, force=force, progress=progress)
        with RunDir(run_dir).hold(wait=lock_wait_seconds()):  # another stage run of the run: wait for it
            return STAGE_TASKS[stage](run_dir, iteration, force=force, progress=progress)
