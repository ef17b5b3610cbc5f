"""Backbone adapter of Qwen-Image-Edit (an image-editing model) through diffusers' QwenImageEditPipeline.

Qwen-Image's transformer reading the source image's latent tokens after the generated image's (the pipeline's
`img_shapes` name both grids), and a text conditioning that has seen the source too: Qwen2.5-VL encodes the
instruction with the source image in its chat template (the pipeline's `encode_prompt(prompt, image)`). Both come from
the source once per prompt, into the prompt's conditioning (cached and reused by every stage, as the text's):
`encoder_hidden_states` (+ mask) and `image_latents`, the source's VAE latents (the VAE's mode, normalised by its
latents_mean / latents_std, as the pipeline's `_encode_vae_image`).

Differs from the pipeline on purpose: the pipeline brings the source to ~1 MP keeping its aspect ratio
(`calculate_dimensions`) for both encoders and generates at that size by default; a training run generates at
`model.resolution`, so the source is brought to that square size (the pipeline's image processor, its resample), for
both. A prompt without a source (the quantize stage's calibration prompt) edits a mid-grey image.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from solrl_core.errors import SolrlError
from solrl_core.models.backbones.base import Conditioning
from solrl_core.models.backbones.qwenimage import QwenImageBackbone
from solrl_core.models.backbones.specs.qwenimage_edit import SPEC

SOURCE_LATENTS = "image_latents"  # the conditioning key of the source's VAE latents (B, 16, 1, H/8, W/8)
GREY = (128, 128, 128)  # the source of a prompt without one


class QwenImageEditBackbone(QwenImageBackbone):
    name = "qwenimage-edit"
    defaults = SPEC.defaults
    pipeline_class = "QwenImageEditPipeline"
    title = "Qwen-Image-Edit"
    edits = SPEC.edits
    max_sources = 1  # QwenImageEditPipeline edits one image (QwenImageEditPlusPipeline several: not adapted)

    @classmethod
    def meta_inputs(cls, config: dict, image_tokens: int, text_tokens: int, batch: int = 1) -> dict:
        """Qwen-Image's inputs for `image_tokens` generated-image tokens, followed by as many of the source's (a
        source at the generated size; `img_shapes` names both grids): what the planner and the memory model count an
        editing forward by."""
        inputs = super().meta_inputs(config, image_tokens, text_tokens, batch)
        grid = inputs["img_shapes"][0][0]
        inputs["hidden_states"] = torch.cat([inputs["hidden_states"]] * 2, dim=1)
        inputs["img_shapes"] = [[grid, grid]] * batch
        return inputs

    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str], sources: Sequence[Sequence] | None = None) -> Conditioning:
        """Qwen2.5-VL's encoding of each instruction with its source image, zero-padded to max_sequence_length with
        its mask, and the source's VAE latents under `image_latents`; `sources`: per prompt, one PIL image."""
        from PIL import Image

        self.require_text_encoders()
        if sources is None:
            sources = [[Image.new("RGB", (self.resolution, self.resolution), GREY)] for _ in prompts]
        if len(sources) != len(prompts) or any(len(s) != 1 for s in sources):
            raise SolrlError(f"{self.title} edits one source image per prompt (got {[len(s) for s in sources]})")
        side, processor = self.resolution, self.pipe.image_processor
        images = [processor.resize(s[0].convert("RGB"), side, side) for s in sources]
        embeds, mask = self.pipe.encode_prompt(prompt=list(prompts), image=images, device=self.device,
                                               max_sequence_length=self.max_sequence_length)
        if embeds.shape[1] > self.max_sequence_length:
            raise SolrlError(f"{self.title}: an instruction with its source image is {embeds.shape[1]} tokens, more "
                             f"than model.max_sequence_length {self.max_sequence_length}; raise it")
        cond = self.padded_text(embeds, mask)
        pixels = processor.preprocess(images, side, side).unsqueeze(2)
        cond[SOURCE_LATENTS] = self.pipe._encode_vae_image(pixels.to(device=self.device, dtype=self.vae.dtype),
                                                           generator=None)
        return cond

    def image_tokens(self, packed: torch.Tensor, shapes: list[tuple[int, int, int]], cond: Conditioning
                     ) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
        """The image's tokens, then the source's, packed alike; `img_shapes` names both grids, as the pipeline's."""
        source = cond[SOURCE_LATENTS].to(device=packed.device, dtype=packed.dtype)
        b, c, _, sh, sw = source.shape
        tokens = torch.cat([packed, type(self.pipe)._pack_latents(source, b, c, sh, sw)], dim=1)
        return tokens, [*shapes, (1, sh // 2, sw // 2)]
