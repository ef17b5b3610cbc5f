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
`STEP.run(StageContext) -> summary`. `ITERATION` lists them in order, and `run_iteration` below runs them so
(the Prefect flow, flows/iteration.py, through a runner that makes each a Prefect task); `run_training` runs the
iterations and the held-out evaluations. `solrl_core/stages/runner.py` runs one (skip it when complete, verify its inputs, commit its
artifact atomically). What a step reads is the stage table's (solrl_core/run/stage_table.py, the ground floor the
run directory machinery reads too): the same-iteration steps before it, and the previous checkpoint. A step's
model work (`work`) is split over the devices when the run has several (solrl_core/stages/shards.py). The algorithm,
the families and the official hyperparameters: docs/method.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from solrl_core.config.schema import RunConfig
from solrl_core.run.rundir import RunDir
from solrl_core.run.stage_table import BY_NAME as TABLE_BY_NAME
from solrl_core.run.stage_table import Stage
from solrl_core.run.staleness import stale_items
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


# The loop: one iteration and the training, as plain functions over a step runner. Neither knows how a step runs: the
# caller passes `run_step(stage, iteration) -> manifest`. The Prefect flows (flows/iteration.py, flows/training.py)
# pass one that wraps each step in its Prefect task (or a run on its work pool); a plain caller (the GPU acceptance,
# a notebook) passes `solrl_core.stages.runner.plain_step_runner`, which runs each stage in this process.
StepRunner = Callable[[str, int], dict]  # (stage, iteration) -> the stage's manifest


def run_iteration(cfg: RunConfig, iteration: int, run_step: StepRunner) -> dict[str, dict]:
    """Every step of `iteration` in order through `run_step`, the audit after score_final when `audit.every` says so
    (it reads the explore and its scores; nothing downstream reads it). Step name -> manifest."""
    audit_now = audit.audit_due(cfg, iteration)
    manifests = {}
    for step in ITERATION:
        manifests[step.name] = run_step(step.name, iteration)
        if step.name == "score_final" and audit_now:
            manifests[AUDIT.name] = run_step(AUDIT.name, iteration)
    return manifests


def evaluation_due(cfg: RunConfig, step: int, iterations: int) -> bool:
    """Whether the held-out evaluation runs after `step` iterations (before training: step 0)."""
    return bool(cfg.eval.every) and (step % cfg.eval.every == 0 or step == iterations)


def run_training(run: RunDir, cfg: RunConfig, iterations: int, iterate: Callable[[int], object],
                 evaluate: Callable[[int], dict] | None = None, after_iteration: Callable[[int], None] | None = None,
                 after_evaluation: Callable[[int, dict], None] | None = None) -> None:
    """Iterations 0 .. `iterations` - 1 through `iterate(iteration)` (`run_iteration` with the caller's runner),
    `after_iteration(iteration)` after each; the held-out evaluation through `evaluate(step)` before training and on
    the config's schedule (`evaluation_due`), `after_evaluation(step, result)` after each; then the evaluations off
    the schedule whose checkpoint was computed again (solrl_core/run/staleness.py)."""
    def evaluated(step: int) -> None:
        result = evaluate(step)
        if after_evaluation:
            after_evaluation(step, result)

    if evaluate and evaluation_due(cfg, 0, iterations):
        evaluated(0)
    for iteration in range(iterations):
        iterate(iteration)
        if after_iteration:
            after_iteration(iteration)
        if evaluate and evaluation_due(cfg, iteration + 1, iterations):
            evaluated(iteration + 1)
    if evaluate:
        for item in stale_items(run):
            if item["stage"] == "eval" and item["step"] <= iterations:
                evaluated(item["step"])
