"""The interface every backbone adapter implements.

A backbone bundles a denoising transformer (a diffusers model class), whatever turns prompts into conditioning, and
whatever turns latents into images. The pipeline only talks to this interface, so the training loop is one loop for
the embedded default and the real models alike.

Conventions (flow matching, as in diffusers' FlowMatchEulerDiscreteScheduler):
  x_t = (1 - t) * x0 + t * eps,  velocity v = eps - x0,  x0 = x_t - t * v,  t = sigma in [0, 1].
"""

from __future__ import annotations

import contextlib
import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from solrl_core.errors import SolrlError
from solrl_core.models.backbones.spec import BackboneDefaults
from solrl_core.seeds import noise_batch

if TYPE_CHECKING:
    from solrl_core.config.schema import ModelConfig

__all__ = ["Backbone", "BackboneDefaults", "Conditioning", "module_device", "sibling_errors"]

Conditioning = dict[str, torch.Tensor]
"""Batch-first tensors the transformer is conditioned on (e.g. encoder_hidden_states, pooled_projections)."""


def module_device(module: torch.nn.Module) -> torch.device:
    """The device a model computes on: that of its first parameter (or buffer). Inputs go there, never the other
    way round (a CPU-drawn noise tensor must not pull the conditioning off the GPU)."""
    for tensor in module.parameters():
        return tensor.device
    for tensor in module.buffers():
        return tensor.device
    return torch.device("cpu")


@contextlib.contextmanager
def sibling_errors() -> Iterator[None]:
    """A SolrlError about model.path inside, re-raised about explore.sibling.path (a sibling's files are checked and
    loaded as the trained model's are)."""
    try:
        yield
    except SolrlError as exc:
        raise SolrlError(str(exc).replace("model.path", "explore.sibling.path")) from None


class Backbone(ABC):
    """Adapter around one text-to-image flow model."""

    name: str
    transformer: torch.nn.Module
    defaults: BackboneDefaults
    # An editing model: a prompt may come with source images, which `encode_prompts(prompts, sources)` (per prompt,
    # a list of PIL images) encodes into the prompt's conditioning with its text (FLUX.1 Kontext). Any other
    # backbone's prompts have no sources.
    edits: bool = False
    max_sources: int = 0  # source images a prompt may have
    # a transformer of several experts (solrl_core/models/experts.py): the ones LoRA trains unless train.experts
    # names others; () = the whole transformer
    trained_experts: tuple[str, ...] = ()

    @classmethod
    @abstractmethod
    def load(cls, model: "ModelConfig") -> "Backbone":
        """Build the adapter from the `model:` config section (path, device, dtype, resolution, ...)."""

    @classmethod
    def check_files(cls, model: "ModelConfig") -> None:
        """Raise a SolrlError naming what is missing when `model.path` cannot hold this backbone's files, without
        loading anything (the preflight of a process that leaves the loading to its device workers)."""

    @classmethod
    def meta_inputs(cls, config: dict, image_tokens: int, text_tokens: int, batch: int = 1) -> dict:
        """Keyword inputs of one forward of the full-size transformer of `config` (its config.json as a dict) for
        `batch` samples of `image_tokens` image and `text_tokens` text tokens, created on the current default device
        (the planner calls it under torch.device("meta")). Needed only by a backbone whose spec names a full-size
        config (the coverage report and the planner)."""
        raise NotImplementedError(f"{cls.__name__} has no meta_inputs: the planner cannot run its transformer")

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

    def step_guidance(self, sigma: float, guidance: float) -> float:
        """The classifier-free guidance scale of a sampling step at `sigma` (the schedule's value, a host float: no
        device read) whose phase's scale is `guidance` (above 1): the same at every step, unless the backbone's
        experts have their own (Wan 2.2 A14B's low-noise expert, WanPipeline's guidance_scale_2)."""
        return guidance

    def calls_at(self, transformer: torch.nn.Module, sigmas: float | Sequence[float]):
        """The context of model calls whose rows are at `sigmas`, known on the host: one float, every row's (a
        sampling step), or one per row (an update's micro-batch). Nothing to set, unless the backbone routes by time
        (a backbone of experts then chooses each row's expert from them instead of reading the rows' timesteps back
        from the device)."""
        return contextlib.nullcontext()

    def combine_guidance(self, v_uncond: torch.Tensor, v_cond: torch.Tensor, guidance: float) -> torch.Tensor:
        """Classifier-free guidance's velocity from the unconditional and conditional ones: v_u + g (v_c - v_u), as
        the diffusers pipelines of SD3, SANA and Wan combine them; a backbone whose pipeline rescales it says so."""
        return v_uncond + guidance * (v_cond - v_uncond)

    def initial_noise(self, seeds: Sequence[int]) -> torch.Tensor:
        """Initial latents of the seeds: randn(latent_shape) from a CPU generator seeded with each seed, on the CPU
        (the same bits on every machine); the sampler moves them to the model's device."""
        return noise_batch(seeds, self.latent_shape)

    def sigmas(self, steps: int) -> list[float]:
        """The sampling schedule's sigmas for `steps` steps, from 1 down, terminal 0 excluded (uniform by default;
        backbones with a resolution-dependent shift override this)."""
        return [1.0 - i / steps for i in range(steps)]

    def release_text_encoders(self) -> None:
        """Free the text encoders (called once every prompt the run needs is in the text-embedding cache)."""

    def sibling(self, path: str) -> "Backbone":
        """A view of this backbone that samples with another model's transformer (`explore.sibling`: a smaller or
        step-distilled sibling): this one's text encoders, decoder and latent space, the sibling's transformer (in
        this one's dtype, on its device) and sampling schedule. SolrlError when the sibling's latents differ."""
        view = copy.copy(self)
        view.transformer = self.load_sibling_transformer(path).eval().requires_grad_(False)
        view.adopt_sibling_schedule(path)
        if view.latent_shape != self.latent_shape:
            raise SolrlError(f"explore.sibling.path {path}: its latents are {tuple(view.latent_shape)}, the trained "
                             f"model's {tuple(self.latent_shape)}; a sibling must share the latent space")
        return view

    def load_sibling_transformer(self, path: str) -> torch.nn.Module:
        """The transformer saved at `path` (a model directory of this backbone's kind), in this one's dtype and
        device."""
        raise SolrlError(f"the {self.name} backbone cannot explore with another model (explore.sibling)")

    def adopt_sibling_schedule(self, path: str) -> None:
        """Take over the sampling schedule saved with the sibling at `path` (called on the view; none by default)."""

    def base_state_dict(self) -> dict[str, torch.Tensor]:
        """The frozen base transformer weights W0 (no adapters)."""
        return {k: v for k, v in self.transformer.state_dict().items() if "lora_" not in k}
