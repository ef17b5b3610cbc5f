"""Backbone adapter of the embedded pixel-space model (see solrl_core.embedded.model)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from solrl_core.backbones.base import Backbone, BackboneDefaults, Conditioning
from solrl_core.embedded.model import WIDTH, EmbeddedModel, latents_to_images, load_model, predict_velocity

PRETRAINED_DIR = Path(__file__).resolve().parent.parent / "embedded" / "pretrained"

DEFAULTS = BackboneDefaults(
    # SD3.5's official LoRA targets: the joint attention's image and context projections
    lora_targets=["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"],
    # SD3.5's official high-precision list (pos_embed is a Conv2d here, so it only matters to a Conv-aware quantizer)
    quant_skip_names=["pos_embed", "context_embedder", "time_text_embed", "norm_out", "norm1", "ff_context"],
    # SD3.5-L's rule scaled to this model: its official floor (2432) is its hidden width, so the attention projections
    # stay in high precision and the feed-forward goes to 4 bits; here the hidden width is 128 (WIDTH). At 32 (attention
    # in 4 bits too, 93% of the Linear FLOPs) the explore ranked seeds far worse: within-prompt Spearman 0.68 vs 0.79
    # at 128 (the fidelity sweep in docs/bench.md)
    quant_min_width=WIDTH,
)


class EmbeddedBackbone(Backbone):
    name = "embedded"
    defaults = DEFAULTS

    def __init__(self, model: EmbeddedModel, device: str = "cpu"):
        self.model = model
        self.device = torch.device(device)
        self.transformer = model.transformer.to(self.device).eval()
        self.text_encoder = model.text_encoder.to(self.device).eval()
        self.text_encoder.requires_grad_(False)
        self.resolution = model.resolution

    @classmethod
    def load(cls, model) -> "EmbeddedBackbone":
        return cls.from_pretrained(model.path, device=model.device)

    @classmethod
    def from_pretrained(cls, path: str | Path | None = None, device: str = "cpu") -> "EmbeddedBackbone":
        """Load a saved model directory; None loads the weights shipped with solrl."""
        return cls(load_model(PRETRAINED_DIR if path is None else path, device=device), device=device)

    @property
    def latent_shape(self) -> tuple[int, ...]:
        return (3, self.resolution, self.resolution)

    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str]) -> Conditioning:
        return {k: v.detach() for k, v in self.model.encode(prompts).items()}

    def velocity(
        self,
        transformer: torch.nn.Module,
        x_t: torch.Tensor,
        sigma: torch.Tensor,
        cond: Conditioning,
        guidance: float = 1.0,
    ) -> torch.Tensor:
        return predict_velocity(transformer, x_t, sigma, cond)

    def decode(self, latents: torch.Tensor) -> np.ndarray:
        return latents_to_images(latents)
