"""Backbone adapter of FLUX.1 Kontext (an image-editing model) through diffusers' FluxKontextPipeline.

Kontext is FLUX.1's transformer reading the source image's latent tokens after the generated image's: `velocity`
packs both, puts the source's tokens after the image's in one sequence (their position ids' first axis 1, the image's
0, as the pipeline builds them) and keeps the prediction of the image's tokens. The source is resized to the generated
image's size (the pipeline's image processor, its PIL resample) and encoded by the VAE's mode (the pipeline's
`_encode_vae_image`, "argmax"), once per prompt: it is part of the prompt's conditioning, `image_latents`, cached and
reused by every stage like the text's. Without a source the model is FLUX.1 text-to-image.

Differs from the pipeline on purpose: the pipeline snaps the source to one of Kontext's preferred ~1 MP resolutions
(`_auto_resize`) and generates at the source's size; a training run generates at `model.resolution`, so the source is
brought to that square size (the pipeline's `_auto_resize=False` with height = width = model.resolution).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from solrl_core.errors import SolrlError
from solrl_core.models.backbones.base import Conditioning
from solrl_core.models.backbones.flux import FluxBackbone
from solrl_core.models.backbones.specs.flux1_kontext import SPEC

SOURCE_LATENTS = "image_latents"  # the conditioning key of the source's VAE latents (B, 16, H/8, W/8)


class FluxKontextBackbone(FluxBackbone):
    name = "flux1-kontext"
    defaults = SPEC.defaults
    pipeline_class = "FluxKontextPipeline"
    title = "FLUX.1 Kontext"
    edits = SPEC.edits
    max_sources = 1  # FluxKontextPipeline conditions on one image

    @classmethod
    def meta_inputs(cls, config: dict, image_tokens: int, text_tokens: int, batch: int = 1) -> dict:
        """FLUX.1's inputs for `image_tokens` generated-image tokens, followed by as many of the source's (a source
        at the generated size): what the planner and the memory model count an editing forward by."""
        inputs = super().meta_inputs(config, 2 * image_tokens, text_tokens, batch)
        inputs["img_ids"][image_tokens:, 0] = 1  # the source's first position axis, as `velocity` builds them
        return inputs

    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str], sources: Sequence[Sequence] | None = None) -> Conditioning:
        """FLUX.1's text conditioning, and with `sources` (per prompt, its one source image: a PIL image) the
        source's VAE latents under `image_latents`."""
        cond = super().encode_prompts(prompts)
        if sources is not None:
            cond[SOURCE_LATENTS] = self.encode_sources(self.one_source_each(sources, len(prompts)))
        return cond

    def one_source_each(self, sources: Sequence[Sequence], n: int) -> list:
        if len(sources) != n or any(len(s) != 1 for s in sources):
            raise SolrlError(f"{self.title} edits one source image per prompt (got {[len(s) for s in sources]})")
        return [s[0] for s in sources]

    def encode_sources(self, images: Sequence) -> torch.Tensor:
        """The VAE latents of PIL images at the generated size, as the pipeline encodes its `image`."""
        side, processor = self.resolution, self.pipe.image_processor
        pixels = processor.preprocess([processor.resize(image.convert("RGB"), side, side) for image in images],
                                      side, side)
        return self.pipe._encode_vae_image(pixels.to(device=self.device, dtype=self.vae.dtype), generator=None)

    def image_tokens(self, packed: torch.Tensor, ids: torch.Tensor, cond: Conditioning
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """The image's tokens, then the source's (when the prompt has one), packed alike; the source's position ids
        are the image's grid with their first axis set to 1, as the pipeline builds them."""
        if SOURCE_LATENTS not in cond:
            return packed, ids
        source = cond[SOURCE_LATENTS].to(device=packed.device, dtype=packed.dtype)
        b, c, sh, sw = source.shape
        return (torch.cat([packed, type(self.pipe)._pack_latents(source, b, c, sh, sw)], dim=1),
                torch.cat([ids, self._source_ids(sh // 2, sw // 2, ids.device, ids.dtype)]))

    def _source_ids(self, height: int, width: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The source grid's position ids (the image's, first axis 1), made once per grid, device and dtype."""
        cache = self.__dict__.setdefault("_source_id_cache", {})
        key = (height, width, device, dtype)
        if key not in cache:
            ids = self._image_ids(height, width, device, dtype).clone()
            ids[:, 0] = 1
            cache[key] = ids
        return cache[key]
