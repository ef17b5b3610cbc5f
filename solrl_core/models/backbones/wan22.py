"""Backbone adapter of Wan2.2-T2V-A14B through diffusers' WanPipeline: Wan 2.1's adapter (solrl_core/models/backbones/
wan.py: the same latents, text encoder, VAE, schedule and transformer call) on two experts.

The pipeline's `transformer` runs the steps whose timestep t (on the scheduler's 0..1000 scale) is at least the
boundary, boundary_ratio x num_train_timesteps, and `transformer_2` the steps below it. The adapter's `transformer`
is both, as one module (solrl_core/models/experts.py) that sends each sample to the expert of its time: sampling
calls the expert the pipeline calls at that step, and the update's batches, whose (sample, time) pairs straddle the
boundary, run each pair through its own expert. The pipeline compares its integer timestep (UniPC's, rounded down)
with the boundary, the adapter 1000σ unrounded; with an integer boundary (875 for A14B's 0.875) the two choose the
same expert at every step.

Classifier-free guidance is the sampler's, with the pipeline's two scales: the phase's (guidance.rollout,
guidance.eval) on the high-noise expert's steps, `model.low_noise_guidance` (the pipeline's guidance_scale_2; null =
the same) on the low-noise expert's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from solrl_core.errors import SolrlError
from solrl_core.models.backbones.specs.wan22 import SPEC
from solrl_core.models.backbones.wan import WanBackbone
from solrl_core.models.experts import TimestepExperts, routed_at


class Wan22Backbone(WanBackbone):
    name = "wan22"
    defaults = SPEC.defaults
    title = "Wan 2.2 A14B"
    trained_experts = SPEC.trained_experts

    def __init__(self, pipe, model):
        missing = [name for name in SPEC.experts if getattr(pipe, name, None) is None]
        ratio = pipe.config.get("boundary_ratio")
        if missing or ratio is None:
            lacks = f"it lacks {', '.join(missing)}" if missing else "its model_index.json has no boundary_ratio"
            raise SolrlError(f"model.path {model.path} is not a two-expert Wan 2.2 A14B model (model.kind wan22): "
                             f"{lacks}; a Wan 2.1 model or Wan2.2-TI2V-5B is model.kind wan")
        if pipe.config.get("expand_timesteps"):
            raise SolrlError(f"model.path {model.path}: expand_timesteps is Wan2.2-TI2V-5B's (model.kind wan)")
        super().__init__(pipe, model)
        self.boundary = ratio * self.scheduler_config["num_train_timesteps"]
        self.transformer = TimestepExperts([(name, getattr(pipe, name)) for name in SPEC.experts], [self.boundary])
        self.low_noise_guidance = model.low_noise_guidance

    def step_guidance(self, sigma: float, guidance: float) -> float:
        """The pipeline's guidance_scale_2 (`model.low_noise_guidance`) on the low-noise expert's steps, `guidance`
        on the high-noise expert's."""
        if self.low_noise_guidance is None:
            return guidance
        t = sigma * self.scheduler_config["num_train_timesteps"]
        return guidance if t >= self.boundary else self.low_noise_guidance

    def calls_at(self, transformer: torch.nn.Module, sigmas: float | Sequence[float]):
        """Each row's expert chosen from its host sigma (no read of the rows' timesteps from the device)."""
        scale = self.scheduler_config["num_train_timesteps"]
        if isinstance(sigmas, float | int):
            return routed_at(transformer, float(sigmas) * scale)
        return routed_at(transformer, [float(s) * scale for s in sigmas])

    def load_sibling_transformer(self, path: str) -> torch.nn.Module:
        raise SolrlError(f"explore.sibling: the {self.title} backbone explores with its own two experts only")
