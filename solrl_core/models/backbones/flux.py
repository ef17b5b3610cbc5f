"""Backbone adapter of FLUX.1 (dev/schnell) through diffusers' FluxPipeline.

The rest of solrl sees plain latents (B, 16, H/8, W/8); `velocity` packs them into 2x2 patches for the transformer
and unpacks its output with the pipeline's own `_pack_latents` / `_unpack_latents`, with the image and text
position ids the pipeline builds. The timestep goes in as sigma in [0, 1] (the pipeline passes `t / 1000`; the
model multiplies by 1000 inside), and FLUX.1-dev's distilled guidance embedding gets the guidance scale directly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from solrl_core.models.backbones.base import Conditioning, module_device
from solrl_core.models.backbones.diffusers_pipeline import DiffusersPipelineBackbone
from solrl_core.models.backbones.specs.flux1 import SPEC


class FluxBackbone(DiffusersPipelineBackbone):
    name = "flux1"
    defaults = SPEC.defaults
    pipeline_class = "FluxPipeline"
    title = "FLUX.1"
    text_encoder_names = ("text_encoder", "text_encoder_2")

    @classmethod
    def meta_inputs(cls, config: dict, image_tokens: int, text_tokens: int, batch: int = 1) -> dict:
        t = torch.ones(batch)
        inputs = dict(
            hidden_states=torch.randn(batch, image_tokens, config["in_channels"]),
            encoder_hidden_states=torch.randn(batch, text_tokens, config["joint_attention_dim"]),
            pooled_projections=torch.randn(batch, config["pooled_projection_dim"]),
            timestep=t,
            img_ids=torch.zeros(image_tokens, 3),
            txt_ids=torch.zeros(text_tokens, 3),
        )
        if config.get("guidance_embeds"):
            inputs["guidance"] = t
        return inputs

    @property
    def latent_channels(self) -> int:
        return self.transformer.config.in_channels // 4  # the transformer sees 2x2-packed latents

    @property
    def patch(self) -> int:
        return 2  # 2x2 latent packing

    def schedule_input(self, steps: int) -> np.ndarray:
        """Uniform sigmas 1, 1 - 1/steps, ..., 1/steps, which the scheduler then shifts dynamically (mu from the
        image sequence length): FluxPipeline's schedule, and the reference's (`pipeline_with_logprob_flux`)."""
        return np.linspace(1.0, 1.0 / steps, steps)

    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str]) -> Conditioning:
        """T5 hidden states (B, max_sequence_length, 4096) and CLIP's pooled output (B, 768) from the pipeline's
        `encode_prompt`; the text position ids are all zeros and are rebuilt in `velocity`."""
        self.require_text_encoders()
        embeds, pooled, _ = self.pipe.encode_prompt(
            prompt=list(prompts), prompt_2=None, device=self.device, max_sequence_length=self.max_sequence_length
        )
        return {"encoder_hidden_states": embeds, "pooled_projections": pooled}

    def _image_ids(self, height: int, width: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The pipeline's image position ids of a packed latent grid, made once per grid, device and dtype (the
        pipeline builds them on the CPU: a host-to-device copy at every step otherwise)."""
        cache = self.__dict__.setdefault("_image_id_cache", {})
        key = (height, width, device, dtype)
        if key not in cache:
            cache[key] = type(self.pipe)._prepare_latent_image_ids(1, height, width, device, dtype)
        return cache[key]

    def velocity(
        self,
        transformer: torch.nn.Module,
        x_t: torch.Tensor,
        sigma: torch.Tensor,
        cond: Conditioning,
        guidance: float = 1.0,
    ) -> torch.Tensor:
        pipe = type(self.pipe)  # the packing helpers are static methods of FluxPipeline
        b, c, h, w = x_t.shape
        dtype, device = transformer.dtype, module_device(transformer)
        text = cond["encoder_hidden_states"].to(device=device, dtype=dtype)
        distilled = transformer.config.guidance_embeds
        tokens, ids = self.image_tokens(pipe._pack_latents(x_t.to(device=device, dtype=dtype), b, c, h, w),
                                        self._image_ids(h // 2, w // 2, device, dtype), cond)
        out = transformer(
            hidden_states=tokens,
            timestep=sigma.to(device=device, dtype=dtype).reshape(-1).expand(b),
            guidance=torch.full((b,), float(guidance), device=device, dtype=torch.float32) if distilled else None,
            pooled_projections=cond["pooled_projections"].to(device=device, dtype=dtype),
            encoder_hidden_states=text,
            txt_ids=torch.zeros(text.shape[1], 3, device=device, dtype=dtype),
            img_ids=ids,
            return_dict=False,
        )[0][:, : (h // 2) * (w // 2)]  # the generated image's tokens (an editing model's source tokens follow)
        scale = self.pipe.vae_scale_factor
        return pipe._unpack_latents(out, h * scale, w * scale, scale).to(x_t.dtype)

    def image_tokens(self, packed: torch.Tensor, ids: torch.Tensor, cond: Conditioning
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """The image token sequence the transformer reads and its position ids, from the packed latents and their ids
        (FLUX.1: those; an editing model appends its source's)."""
        return packed, ids
