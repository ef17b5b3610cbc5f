"""Backbone adapter of the embedded video model (solrl_core/models/embedded/video_model.py): a sample is a video, its
latent the frames themselves (3, frames, R, R)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from solrl_core.errors import SolrlError
from solrl_core.models.backbones.base import Conditioning
from solrl_core.models.backbones.diffusers_pipeline import DTYPES
from solrl_core.models.backbones.embedded import EmbeddedBackbone
from solrl_core.models.backbones.specs.embedded_video import SPEC
from solrl_core.models.embedded.model import EmbeddedModel, load_model
from solrl_core.models.embedded.video_model import check_input_channels, latents_to_videos, predict_video_velocity

PRETRAINED_VIDEO_DIR = Path(__file__).resolve().parent.parent / "embedded" / "pretrained_video"


class EmbeddedVideoBackbone(EmbeddedBackbone):
    name = "embedded_video"
    defaults = SPEC.defaults
    pretrained_dir = PRETRAINED_VIDEO_DIR
    makes_videos = True

    def __init__(self, model: EmbeddedModel, device: str = "cpu", frames: int | None = None):
        if model.frames and frames not in (None, model.frames):
            raise SolrlError(f"model.frames {frames}: the embedded video model makes {model.frames}-frame videos (its "
                             f"weights); set model.frames: null")
        super().__init__(model, device)
        check_input_channels(model.transformer)
        self.frames = model.frames

    @classmethod
    def load(cls, model) -> "EmbeddedVideoBackbone":
        loaded = load_model(cls.pretrained_dir if model.path is None else model.path, device=model.device,
                            dtype=DTYPES[model.dtype])
        return cls(loaded, device=model.device, frames=model.frames)

    @property
    def latent_shape(self) -> tuple[int, ...]:
        return (3, self.frames, self.resolution, self.resolution)

    def velocity(self, transformer: torch.nn.Module, x_t: torch.Tensor, sigma: torch.Tensor, cond: Conditioning,
                 guidance: float = 1.0) -> torch.Tensor:
        return predict_video_velocity(transformer, x_t, sigma, cond)

    def decode(self, latents: torch.Tensor) -> np.ndarray:
        """Frames as uint8 (B, frames, R, R, 3)."""
        return latents_to_videos(latents)
