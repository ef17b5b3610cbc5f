"""Which stages exist, what each needs first, and how one is run (skip if complete, check inputs, time, record)."""

from __future__ import annotations

import time
from collections.abc import Callable

from solrl_core.config import RunConfig
from solrl_core.errors import MissingInputError
from solrl_core.rundir import STAGES, RunDir
from solrl_core.stages.context import StageContext


def _funcs() -> dict[str, Callable[[StageContext], dict]]:
    from solrl_core.stages.explore import run_explore
    from solrl_core.stages.quantize import run_quantize
    from solrl_core.stages.regenerate import run_regenerate
    from solrl_core.stages.score import run_score_explore, run_score_final
    from solrl_core.stages.select import run_select
    from solrl_core.stages.update import run_update

    return {
        "quantize": run_quantize,
        "explore": run_explore,
        "score_explore": run_score_explore,
        "select": run_select,
        "regenerate": run_regenerate,
        "score_final": run_score_final,
        "update": run_update,
    }


# Same-iteration inputs of each stage. quantize and update also need the previous iteration's update (checkpoint).
REQUIRES: dict[str, tuple[str, ...]] = {
    "quantize": (),
    "explore": ("quantize",),
    "score_explore": ("explore",),
    "select": ("score_explore",),
    "regenerate": ("select", "quantize"),
    "score_final": ("regenerate",),
    "update": ("score_final",),
}
NEEDS_PREVIOUS_CHECKPOINT = ("quantize", "update")


def missing_inputs(run: RunDir, iteration: int, stage: str) -> list[tuple[int, str]]:
    missing = [(iteration, s) for s in REQUIRES[stage] if not run.is_complete(iteration, s)]
    if stage in NEEDS_PREVIOUS_CHECKPOINT and iteration > 0 and not run.is_complete(iteration - 1, "update"):
        missing.insert(0, (iteration - 1, "update"))
    return missing


def run_stage(
    run: RunDir, cfg: RunConfig, iteration: int, stage: str, force: bool = False, progress: bool = True
) -> dict:
    """Run one stage unless already complete (or `force`); return its manifest. The caller holds the run dir."""
    if stage not in STAGES:
        raise MissingInputError(f"unknown stage '{stage}' (stages: {', '.join(STAGES)})")
    missing = missing_inputs(run, iteration, stage)
    return run_recorded(run, cfg, iteration, stage, _funcs()[stage], missing, force, progress, f"stage '{stage}'")


def run_recorded(run: RunDir, cfg: RunConfig, iteration: int, name: str, func, missing: list[tuple[int, str]],
                 force: bool, progress: bool, what: str) -> dict:
    """The one way a recorded step runs: return its manifest if complete (unless `force`), refuse when inputs are
    missing (naming the stage to run first), otherwise run `func`, time it and write the manifest last."""
    if run.is_complete(iteration, name) and not force:
        return run.manifest(iteration, name)
    if missing:
        it, first = missing[0]
        raise MissingInputError(
            f"{what} of iteration {iteration} needs '{first}' of iteration {it} first: "
            f"solrl stage {first} --run-dir {run.root} --iteration {it}"
        )
    if force:
        run.invalidate(iteration, name)
    start = time.perf_counter()
    summary = func(StageContext(run, cfg, iteration, progress))
    summary["seconds"] = round(time.perf_counter() - start, 3)
    return run.complete(iteration, name, summary)
