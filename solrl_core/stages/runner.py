"""How one step of the method (solrl_core/method.py) runs as a stage of the run directory: skip it if complete and
not stale, check its inputs, time it, commit its artifact (the previous artifact, if any, stays complete until the
new one is: solrl_core/run/commit.py)."""

from __future__ import annotations

import time

from solrl_core import stop
from solrl_core.config.schema import RunConfig
from solrl_core.errors import MissingInputError
from solrl_core.run.integrity import verify_checkpoint, verify_stage
from solrl_core.run.rundir import RunDir
from solrl_core.run.stage_table import BY_NAME, STAGES
from solrl_core.run.staleness import (input_ids, missing_input_error, missing_inputs, stage_dependencies, stage_key,
                                      stale_causes)
from solrl_core.run.storage import is_remote


def verify_inputs(run: RunDir, iteration: int, stage: str) -> None:
    """Refuse (naming the file and the command that rebuilds it) when an artifact `stage` reads is damaged."""
    if BY_NAME[stage].needs_previous_checkpoint:
        verify_checkpoint(run, iteration - 1)
    for name in BY_NAME[stage].reads:
        verify_stage(run, iteration, name)


def run_stage(
    run: RunDir, cfg: RunConfig, iteration: int, stage: str, force: bool = False, progress: bool = True
) -> dict:
    """The one way a stage runs (the caller holds the run dir): finish a commit of it left under way,
    return its manifest if complete and not stale (unless `force`), refuse when inputs are missing or stale (naming
    the stage to run first) or damaged (solrl_core/run/integrity.py), otherwise run it into its partial directory, time it
    and commit it: the artifact moved in place of the previous one, the manifest (with the ids of the inputs it read
    and its own file inventory) written last."""
    if stage not in BY_NAME:
        raise MissingInputError(f"unknown stage '{stage}' (stages: {', '.join(STAGES)})")
    stop.check()  # a Ctrl-C or SIGTERM whose interrupt was lost before this stage: stop here (solrl_core/stop.py)
    run.recover_stage(iteration, stage)
    causes = stale_causes(run, iteration)  # read once: every manifest of iterations 0..iteration
    if run.is_complete(iteration, stage) and not force and stage_key(iteration, stage) not in causes:
        if not is_remote(run.root):  # kept: its files there, at their sizes (a stat each; an object store would
            verify_stage(run, iteration, stage, contents=False)  # take a listing per stage on every resume)
        return run.manifest(iteration, stage)
    missing = missing_inputs(run, iteration, stage, causes)
    if missing:
        what = f"stage '{stage}'" if stage in STAGES else f"the {stage}"
        raise missing_input_error(run, iteration, what, missing)
    verify_inputs(run, iteration, stage)
    inputs = input_ids(run, stage_dependencies(iteration, stage))
    run.start_attempt(iteration, stage, inputs, resume=not force)
    from solrl_core.method import BY_NAME as STEPS  # torch: only when a stage really runs
    from solrl_core.stages.context import StageContext

    start = time.perf_counter()
    summary = STEPS[stage].run(StageContext(run, cfg, iteration, progress))
    summary["seconds"] = round(time.perf_counter() - start, 3)
    return run.commit(iteration, stage, summary, inputs)


def plain_step_runner(run: RunDir, cfg: RunConfig, progress: bool = False):
    """A step runner for `solrl_core.method.run_iteration` that runs each stage here, in this process (skipped when
    complete and current): the loop without Prefect (the GPU acceptance, a notebook)."""
    return lambda stage, iteration: run_stage(run, cfg, iteration, stage, progress=progress)
