"""One Sol-RL iteration, step by step. Read this file first.

An iteration takes the policy of the previous one (the LoRA θ and θ_old on the frozen base weights W0: iteration
i-1's `update`, or the run's `init/` for iteration 0) and a fresh draw of prompts, and trains it once:

    quantize       the explore copy: W0 + θ_old with its Linear layers in the explore precision (NVFP4, FP8)
    explore        N seeds per prompt sampled by that cheap copy, into the candidate pool (the ODE, or the objective's
                   SDE: Flow-GRPO)
    score_explore  the proxy reward of every candidate (the reward models on the cheap samples)
    select         per prompt, the K most contrastive seeds (best and worst by proxy reward)
    regenerate     those seeds again from the same initial noise, at full precision and the full step budget (with
                   the SDE's trajectory and log-probabilities when the objective trains on them)
    score_final    the final reward R of every regenerated sample
    update         optimizer steps of the objective (`objective.name`: DiffusionNFT, Flow-GRPO, AWM; solrl_core/rl/
                   objectives.py) on the regenerated samples, then θ_old and the EMA follow θ

and, every `audit.every` iterations, the `audit` after score_final: the whole explore pool regenerated at full
precision, to measure how well the cheap explore ranks seeds (nothing downstream reads it).

Each step is a stage: a function from artifacts in the run directory to an artifact (solrl_core/stages/<module>.py),
`STEP.run(StageContext) -> summary`. `ITERATION` lists them in the order the Prefect flow runs them
(flows/iteration.py); `solrl_core/stages/runner.py` runs one (skip it when complete, verify its inputs, commit its
artifact atomically). What a step reads is the stage table's (solrl_core/run/stage_table.py, the ground floor the
run directory machinery reads too): the same-iteration steps before it, and the previous checkpoint. A step's
model work (`work`) is split over the devices when the run has several (solrl_core/stages/shards.py). The algorithm,
the families and the official hyperparameters: docs/method.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from solrl_core.run.stage_table import BY_NAME as TABLE_BY_NAME
from solrl_core.run.stage_table import Stage
from solrl_core.stages import audit, explore, quantize, regenerate, score, update
from solrl_core.stages.select import run_select


@dataclass(frozen=True)
class Step:
    stage: Stage  # name and inputs, as the run directory records them
    run: Callable[..., dict]  # (StageContext) -> summary, written into the step's manifest
    writes: str  # its artifact, in iter_NNNN/<name>/
    work: tuple[Callable, ...] = ()  # its model work, (StageContext) -> work split over the devices

    @property
    def name(self) -> str:
        return self.stage.name


def _step(name: str, run: Callable[..., dict], writes: str, *work: Callable) -> Step:
    return Step(TABLE_BY_NAME[name], run, writes, work)


ITERATION: tuple[Step, ...] = (
    _step("quantize", quantize.run_quantize,
          "report.json: the explore precision and backend, the layers replaced and kept, the calibration error",
          quantize.report_work),
    _step("explore", explore.run_explore,
          "pool.zarr: N seeds per prompt from the explore copy (images, latents, seeds); scores.zarr when scored "
          "while sampling", explore.sampling),
    _step("score_explore", score.run_score_explore,
          "rewards.zarr: every reward's score and the proxy reward of each candidate", score.explore_scoring),
    _step("select", run_select,
          "selection.zarr: the K seeds kept per prompt"),
    _step("regenerate", regenerate.run_regenerate,
          "samples.zarr: the selected seeds at full precision, same noise, full steps", regenerate.sampling),
    _step("score_final", score.run_score_final,
          "rewards.zarr: every reward's score and the final reward R of each training sample", score.final_scoring),
    _step("update", update.run_update,
          "checkpoint/ (θ and θ_old adapters, EMA, optimizer state) and metrics.json (loss, KL, grad norm per step)",
          update.update_rank),
)
AUDIT: Step = _step("audit", audit.run_audit,
                    "the explore pool at full precision, its final rewards and the ranking fidelity numbers",
                    audit.sampling, audit.scoring)

BY_NAME: dict[str, Step] = {step.name: step for step in (*ITERATION, AUDIT)}
