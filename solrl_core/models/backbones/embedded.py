"""Backbone adapter of the embedded pixel-space model (see solrl_core.models.embedded.model)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from solrl_core.errors import SolrlError
from solrl_core.models.backbones.base import Backbone, Conditioning
from solrl_core.models.backbones.diffusers_pipeline import DTYPES
from solrl_core.models.backbones.specs.embedded import SPEC
from solrl_core.models.embedded.model import (
    EmbeddedModel,
    check_model_dir,
    latents_to_images,
    load_model,
    predict_velocity,
)

PRETRAINED_DIR = Path(__file__).resolve().parent.parent / "embedded" / "pretrained"


class EmbeddedBackbone(Backbone):
    name = "embedded"
    defaults = SPEC.defaults
    pretrained_dir = PRETRAINED_DIR  # the weights shipped with solrl, loaded when model.path is null
    makes_videos = False  # the weights' kind: images, or videos (EmbeddedVideoBackbone)

    def __init__(self, model: EmbeddedModel, device: str = "cpu"):
        if bool(model.frames) != self.makes_videos:
            raise SolrlError("model.path holds an embedded video model; set model.kind: embedded_video" if model.frames
                             else f"model.path holds an embedded image model; model.kind {self.name} needs a video "
                             "one (solrl pretrain --world motion)")
        if model.metadata.get("edits") and not self.edits:
            raise SolrlError("model.path holds an embedded editing model; set model.kind: embedded_edit")
        self.model = model
        self.device = torch.device(device)
        self.transformer = model.transformer.to(self.device).eval()
        self.text_encoder = model.text_encoder.to(self.device).eval()
        self.text_encoder.requires_grad_(False)
        self.resolution = model.resolution

    @classmethod
    def check_files(cls, model) -> None:
        check_model_dir(cls.pretrained_dir if model.path is None else model.path)

    @classmethod
    def load(cls, model) -> "EmbeddedBackbone":
        return cls.from_pretrained(model.path, device=model.device, dtype=DTYPES[model.dtype])

    @classmethod
    def from_pretrained(
        cls, path: str | Path | None = None, device: str = "cpu", dtype: torch.dtype = torch.float32
    ) -> "EmbeddedBackbone":
        """Load a saved model directory (transformer and text encoder in `dtype`); None loads the weights shipped
        with solrl."""
        model = load_model(cls.pretrained_dir if path is None else path, device=device, dtype=dtype)
        return cls(model, device=device)

    def load_sibling_transformer(self, path: str) -> torch.nn.Module:
        """The transformer of the embedded model directory `path` (e.g. `solrl distill-sibling`'s)."""
        sibling = load_model(path, device=str(self.device), dtype=next(self.transformer.parameters()).dtype)
        if sibling.resolution != self.resolution:
            raise SolrlError(f"explore.sibling.path {path}: its images are {sibling.resolution}x{sibling.resolution}, "
                             f"the trained model's {self.resolution}x{self.resolution}; a sibling must share them")
        return sibling.transformer

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
