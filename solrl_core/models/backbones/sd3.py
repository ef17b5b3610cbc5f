"""Backbone adapter of Stable Diffusion 3.5 (Large and Medium) through diffusers' StableDiffusion3Pipeline.

Latents are the VAE's (B, 16, H/8, W/8); the transformer patchifies them itself. The timestep goes in on the
scheduler's 0..1000 scale (the pipeline passes `t = sigma * 1000` unchanged). No classifier-free guidance here:
the sampler combines conditional and unconditional velocities itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from solrl_core.models.backbones.base import Conditioning
from solrl_core.models.backbones.diffusers_pipeline import DiffusersPipelineBackbone, square_side
from solrl_core.models.backbones.specs.sd35l import SPEC
from solrl_core.errors import SolrlError


class SD3Backbone(DiffusersPipelineBackbone):
    name = "sd35"
    defaults = SPEC.defaults  # SD3.5-Large's official settings (SD3.5-Medium's spec differs only in min width)
    pipeline_class = "StableDiffusion3Pipeline"
    title = "SD3.5"
    text_encoder_names = ("text_encoder", "text_encoder_2", "text_encoder_3")

    @classmethod
    def meta_inputs(cls, config: dict, image_tokens: int, text_tokens: int, batch: int = 1) -> dict:
        side = square_side(config, image_tokens)
        return dict(
            hidden_states=torch.randn(batch, config["in_channels"], side, side),
            encoder_hidden_states=torch.randn(batch, text_tokens, config["joint_attention_dim"]),
            pooled_projections=torch.randn(batch, config["pooled_projection_dim"]),
            timestep=torch.ones(batch),
        )

    def check_resolution(self) -> None:
        super().check_resolution()
        max_tokens = self.transformer.config.pos_embed_max_size
        scale = self.pipe.vae_scale_factor * self.patch
        if max_tokens and self.resolution // scale > max_tokens:
            raise SolrlError(
                f"model.resolution {self.resolution} is too large for this SD3 transformer "
                f"(at most {max_tokens * scale} px: pos_embed_max_size {max_tokens})"
            )

    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str]) -> Conditioning:
        """The joint text sequence (B, CLIP_TOKENS + max_sequence_length, 4096: CLIP-L and CLIP-G penultimate
        states, zero-padded to the T5 width, then T5; CLIP_TOKENS in solrl_core/models/backbones/specs/sd35l.py) and the
        pooled CLIP-L + CLIP-G embeddings (B, 2048), from the pipeline's `encode_prompt` without CFG."""
        self.require_text_encoders()
        embeds, _, pooled, _ = self.pipe.encode_prompt(
            prompt=list(prompts),
            prompt_2=None,
            prompt_3=None,
            device=self.device,
            do_classifier_free_guidance=False,
            max_sequence_length=self.max_sequence_length,
        )
        return {"encoder_hidden_states": embeds, "pooled_projections": pooled}

    def velocity(
        self,
        transformer: torch.nn.Module,
        x_t: torch.Tensor,
        sigma: torch.Tensor,
        cond: Conditioning,
        guidance: float = 1.0,
    ) -> torch.Tensor:
        return self.scheduler_time_velocity(transformer, x_t, sigma, cond)  # encoder_hidden_states, pooled_projections
