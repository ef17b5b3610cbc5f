"""The stages of an iteration as the run directory knows them, declared once: name, the same-iteration stages whose
artifacts each one reads, whether it starts from the previous checkpoint. Plain data, on the ground floor: the run
directory, staleness, integrity and the config read it without importing any stage. What each stage does and
writes, and the order an iteration runs them in: solrl_core/method.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    requires: tuple[str, ...] = ()  # stages of the same iteration that must be complete first
    needs_previous_checkpoint: bool = False  # the previous iteration's update (iteration 0: the initial adapters)
    in_pipeline: bool = True  # one of the training STAGES of every iteration (the audit is optional)
    also_reads: tuple[str, ...] = ()  # other stages of the same iteration whose artifacts it reads when complete

    @property
    def reads(self) -> tuple[str, ...]:
        """The stages of the same iteration whose artifacts it reads: checked before it runs (integrity.py)."""
        return self.requires + self.also_reads


TABLE: tuple[Stage, ...] = (
    Stage("quantize", needs_previous_checkpoint=True),
    Stage("explore", ("quantize",), needs_previous_checkpoint=True),
    Stage("score_explore", ("explore",)),
    Stage("select", ("score_explore",), also_reads=("explore",)),
    Stage("regenerate", ("select",), needs_previous_checkpoint=True, also_reads=("explore",)),
    Stage("score_final", ("regenerate",), also_reads=("score_explore",)),
    Stage("update", ("score_final",), needs_previous_checkpoint=True, also_reads=("regenerate",)),
    Stage("audit", ("quantize", "explore", "score_explore"), needs_previous_checkpoint=True, in_pipeline=False,
          also_reads=("select",)),
)

BY_NAME = {stage.name: stage for stage in TABLE}
STAGES = tuple(stage.name for stage in TABLE if stage.in_pipeline)  # the training stages of one iteration, in order
