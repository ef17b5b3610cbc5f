"""What every stage receives: the run, its config, the iteration, and the prompts' conditioning."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from solrl_core.config.schema import RunConfig
from solrl_core.run.rundir import RunDir
from solrl_core.models.text_cache import run_text_cache


@dataclass
class StageContext:
    run: RunDir
    cfg: RunConfig
    iteration: int
    progress: bool = True

    @property
    def out_stage_dir(self) -> Path:
        return self.run.iteration_dir(self.iteration)

    def artifact(self, stage: str, name: str) -> Path:
        return self.run.stage_dir(self.iteration, stage) / name

    def encode(self, prompts, sources=None) -> dict[str, torch.Tensor]:
        """Batch-first conditioning of `prompts` (an edit prompt with its `sources`, per prompt) from the run's
        text-embedding cache (solrl_core/models/text_cache.py)."""
        return run_text_cache(self.run, self.cfg, progress=self.progress).get(prompts, sources)
