"""How one stage of the table (solrl_core/stages/table.py) is run: skip if complete, check inputs, time, record."""

from __future__ import annotations

import time

from solrl_core.config import RunConfig
from solrl_core.errors import MissingInputError
from solrl_core.integrity import verify_checkpoint, verify_stage
from solrl_core.rundir import RunDir
from solrl_core.stages.table import BY_NAME, STAGES, load


def missing_inputs(run: RunDir, iteration: int, stage: str) -> list[tuple[int, str]]:
    spec = BY_NAME[stage]
    missing = [(iteration, s) for s in spec.requires if not run.is_complete(iteration, s)]
    if spec.needs_previous_checkpoint and iteration > 0 and not run.is_complete(iteration - 1, "update"):
        missing.insert(0, (iteration - 1, "update"))
    return missing


def verify_inputs(run: RunDir, iteration: int, stage: str) -> None:
    """Refuse (naming the file and the command that rebuilds it) when an artifact `stage` reads is damaged."""
    if BY_NAME[stage].needs_previous_checkpoint:
        verify_checkpoint(run, iteration - 1)
    for name in BY_NAME[stage].reads:
        verify_stage(run, iteration, name)


def run_stage(
    run: RunDir, cfg: RunConfig, iteration: int, stage: str, force: bool = False, progress: bool = True
) -> dict:
    """Run one stage of the table unless already complete (or `force`); return its manifest. The caller holds the
    run dir."""
    if stage not in BY_NAME:
        raise MissingInputError(f"unknown stage '{stage}' (stages: {', '.join(STAGES)})")
    what = f"stage '{stage}'" if stage in STAGES else f"the {stage}"
    missing = missing_inputs(run, iteration, stage)
    return run_recorded(run, cfg, iteration, stage, load(BY_NAME[stage].run), missing, force, progress, what)


def run_recorded(run: RunDir, cfg: RunConfig, iteration: int, name: str, func, missing: list[tuple[int, str]],
                 force: bool, progress: bool, what: str) -> dict:
    """The one way a recorded step runs: return its manifest if complete (unless `force`), refuse when inputs are
    missing (naming the stage to run first) or damaged (solrl_core/integrity.py), otherwise run `func`, time it and
    write the manifest last."""
    if run.is_complete(iteration, name) and not force:
        return run.manifest(iteration, name)
    if missing:
        it, first = missing[0]
        raise MissingInputError(
            f"{what} of iteration {iteration} needs '{first}' of iteration {it} first: "
            f"solrl stage {first} --run-dir {run.root} --iteration {it}"
        )
    verify_inputs(run, iteration, name)
    if force:
        run.invalidate(iteration, name)
    from solrl_core.stages.context import StageContext  # torch: only when a stage really runs

    start = time.perf_counter()
    summary = func(StageContext(run, cfg, iteration, progress))
    summary["seconds"] = round(time.perf_counter() - start, 3)
    return run.complete(iteration, name, summary)
