"""The stages, declared once: name, function, same-iteration inputs, whether the previous checkpoint is needed, and
the work that can be split over devices. The run directory, the stage registry, the Prefect tasks and the config
validation all read this table.

Functions are named as "module:function" strings, so reading the table imports nothing (no torch, no cycle); `load`
imports one when it is called.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    run: str  # "module:function", (StageContext) -> summary dict
    requires: tuple[str, ...] = ()  # stages of the same iteration that must be complete first
    needs_previous_checkpoint: bool = False  # the previous iteration's update (iteration 0: the initial adapters)
    split: tuple[str, ...] = ()  # "module:function"s, (StageContext) -> the stage's work split over the devices
    in_pipeline: bool = True  # one of the training STAGES of every iteration (the audit is optional)
    also_reads: tuple[str, ...] = ()  # other stages of the same iteration whose artifacts it reads when complete

    @property
    def reads(self) -> tuple[str, ...]:
        """The stages of the same iteration whose artifacts it reads: checked before it runs (integrity.py)."""
        return self.requires + self.also_reads

    @property
    def splittable(self) -> bool:
        return bool(self.split)


_EXPLORE = "solrl_core.stages.explore"
_REGENERATE = "solrl_core.stages.regenerate"
_SCORE = "solrl_core.stages.score"
_AUDIT = "solrl_core.stages.audit"

TABLE: tuple[Stage, ...] = (
    Stage("quantize", "solrl_core.stages.quantize:run_quantize", needs_previous_checkpoint=True,
          split=("solrl_core.stages.quantize:report_work",)),
    Stage("explore", f"{_EXPLORE}:run_explore", ("quantize",), needs_previous_checkpoint=True, split=(f"{_EXPLORE}:sampling",)),
    Stage("score_explore", f"{_SCORE}:run_score_explore", ("explore",), split=(f"{_SCORE}:explore_scoring",)),
    Stage("select", "solrl_core.stages.select:run_select", ("score_explore",), also_reads=("explore",)),
    Stage("regenerate", f"{_REGENERATE}:run_regenerate", ("select",), needs_previous_checkpoint=True,
          split=(f"{_REGENERATE}:sampling",), also_reads=("explore",)),
    Stage("score_final", f"{_SCORE}:run_score_final", ("regenerate",), split=(f"{_SCORE}:final_scoring",),
          also_reads=("score_explore",)),
    Stage("update", "solrl_core.stages.update:run_update", ("score_final",), needs_previous_checkpoint=True,
          also_reads=("regenerate",)),
    Stage("audit", f"{_AUDIT}:run_audit", ("quantize", "explore", "score_explore"), needs_previous_checkpoint=True,
          split=(f"{_AUDIT}:sampling", f"{_AUDIT}:scoring"), in_pipeline=False, also_reads=("select",)),
)
# The held-out evaluation is not a recorded stage (its artifact lives in <run>/eval/step_NNNN), but its work is split
# the same way: sampling, then scoring.
EVALUATION_SPLIT = ("solrl_core.evaluate:sampling", "solrl_core.evaluate:scoring")

BY_NAME = {stage.name: stage for stage in TABLE}
STAGES = tuple(stage.name for stage in TABLE if stage.in_pipeline)  # the training stages of one iteration, in order
SPLITTABLE = tuple(stage.name for stage in TABLE if stage.splittable)


def load(ref: str):
    """The object a "module:function" string names."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)
