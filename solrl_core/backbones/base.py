"""The interface every backbone adapter implements.

A backbone bundles a denoising transformer (a diffusers model class), whatever turns prompts into conditioning, and
whatever turns latents into images. The pipeline only talks to this interface, so the training loop is one loop for
the embedded default and the real models alike.

Conventions (flow matching, as in diffusers' FlowMatchEulerDiscreteScheduler):
  x_t = (1 - t) * x0 + t * eps,  velocity v = eps - x0,  x0 = x_t - t * v,  t = sigma in [0, 1].
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from solrl_core.seeds import noise_batch

if TYPE_CHECKING:
    from solrl_core.config import ModelConfig

Conditioning = dict[str, torch.Tensor]
"""Batch-first tensors the transformer is conditioned on (e.g. encoder_hidden_states, pooled_projections)."""


@dataclass(frozen=True)
class BackboneDefaults:
    """Per-backbone defaults that configs may override (train.lora_targets, quant.*, model.sampler,
    model.max_sequence_length, train.optimizer.grad_clip, ...)."""

    lora_targets: list[str]
    quant_skip_names: list[str]
    quant_min_width: int
    sampler: str = "euler"
    resolution: int = 32
    distilled_guidance: bool = False  # True: the guidance scale is a model input (FLUX.1-dev), not CFG
    max_sequence_length: int | None = None  # prompt tokens of the text encoder (T5, Gemma); None: no such setting
    grad_clip: float = 1.0  # the update's gradient-norm clip (train.optimizer.grad_clip)
    extra: dict = field(default_factory=dict)


class Backbone(ABC):
    """Adapter around one text-to-image flow model."""

    name: str
    transformer: torch.nn.Module
    defaults: BackboneDefaults

    @classmethod
    @abstractmethod
    def load(cls, model: "ModelConfig") -> "Backbone":
        """Build the adapter from the `model:` config section (path, device, dtype, resolution, ...)."""

    @property
    @abstractmethod
    def latent_shape(self) -> tuple[int, ...]:
        """Shape of one sample's latent, without the batch dimension."""

    @abstractmethod
    def encode_prompts(self, prompts: Sequence[str]) -> Conditioning:
        """Conditioning for a batch of prompts (no grad)."""

    @abstractmethod
    def velocity(
        self,
        transformer: torch.nn.Module,
        x_t: torch.Tensor,
        sigma: torch.Tensor,
        cond: Conditioning,
        guidance: float = 1.0,
    ) -> torch.Tensor:
        """Model velocity v(x_t, sigma) for a batch; `sigma` has shape (B,), values in [0, 1]. `guidance` is only
        read by backbones with a distilled guidance input (defaults.distilled_guidance); CFG is the sampler's job."""

    @abstractmethod
    def decode(self, latents: torch.Tensor) -> np.ndarray:
        """Images as uint8 array (B, H, W, 3)."""

    def initial_noise(self, seeds: Sequence[int]) -> torch.Tensor:
        """Initial latents of the seeds: randn(latent_shape) from a generator seeded with each seed."""
        return noise_batch(seeds, self.latent_shape)

    def sigmas(self, steps: int) -> list[float]:
        """The sampling schedule's sigmas for `steps` steps, from 1 down, terminal 0 excluded (uniform by default;
        backbones with a resolution-dependent shift override this)."""
        return [1.0 - i / steps for i in range(steps)]

    def release_text_encoders(self) -> None:
        """Free the text encoders (called once every prompt the run needs is in the text-embedding cache)."""

    def base_state_dict(self) -> dict[str, torch.Tensor]:
        """The frozen base transformer weights W0 (no adapters)."""
        return {k: v for k, v in self.transformer.state_dict().items() if "lora_" not in k}
