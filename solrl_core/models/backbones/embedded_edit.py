"""Backbone adapter of the embedded editing model (solrl_core/models/embedded/edit_model.py): the embedded image
model that also sees its prompt's source image. Its conditioning holds the instruction's encoding and the source
(resized to the model's size, PIL Lanczos), once per prompt in the run's text cache."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from solrl_core.errors import SolrlError
from solrl_core.models.backbones.base import Conditioning
from solrl_core.models.backbones.embedded import EmbeddedBackbone
from solrl_core.models.backbones.specs.embedded_edit import SPEC
from solrl_core.models.embedded.edit_model import (EDITS_KEY, SOURCE, instruction_of, predict_edit_velocity,
                                                   source_latents)
from solrl_core.models.embedded.model import EmbeddedModel

PRETRAINED_EDIT_DIR = Path(__file__).resolve().parent.parent / "embedded" / "pretrained_edit"


class EmbeddedEditBackbone(EmbeddedBackbone):
    name = "embedded_edit"
    defaults = SPEC.defaults
    pretrained_dir = PRETRAINED_EDIT_DIR
    edits = SPEC.edits
    max_sources = 1

    def __init__(self, model: EmbeddedModel, device: str = "cpu"):
        if not model.metadata.get(EDITS_KEY):
            raise SolrlError("model.path holds an embedded model that does not edit; model.kind embedded_edit needs "
                             "an editing one (solrl pretrain --world edits)")
        super().__init__(model, device)

    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str], sources: Sequence[Sequence] | None = None) -> Conditioning:
        """The instructions' encoding (an edit prompt's text after its scene), and with `sources` (per prompt, one PIL
        image) the sources at the model's size."""
        cond = {k: v.detach() for k, v in self.model.encode([instruction_of(p) for p in prompts]).items()}
        if sources is not None:
            if any(len(s) != 1 for s in sources):
                raise SolrlError(f"the embedded editing model edits one source image per prompt (got "
                                 f"{[len(s) for s in sources]})")
            from PIL import Image

            side = self.resolution
            images = np.stack([np.asarray(s[0].convert("RGB").resize((side, side), Image.LANCZOS)) for s in sources])
            cond[SOURCE] = source_latents(images).to(self.device)
        return cond

    def velocity(self, transformer: torch.nn.Module, x_t: torch.Tensor, sigma: torch.Tensor, cond: Conditioning,
                 guidance: float = 1.0) -> torch.Tensor:
        return predict_edit_velocity(transformer, x_t, sigma, cond)
