"""Backbone adapter of Qwen-Image through diffusers' QwenImagePipeline.

The rest of solrl sees plain latents (B, 16, H/8, W/8); `velocity` packs them into 2x2 patches with the pipeline's
own `_pack_latents` / `_unpack_latents` and passes the image shapes the pipeline passes. Prompts go through the
pipeline's `encode_prompt` (Qwen2.5-VL's last hidden states after its chat template, the template's 34 tokens
dropped); they are padded here to `max_sequence_length` with a zero attention mask, so cached conditionings of any
prompts stack into one batch (masked text tokens change nothing the image tokens see). The schedule is the
pipeline's: uniform sigmas shifted with mu from the image sequence length. `decode` un-normalises with the VAE's
per-channel latents_mean / latents_std as the pipeline does and decodes the single-frame video latent.

Qwen-Image has no distilled guidance. Its pipelines' "true CFG" (`true_cfg_scale` with a negative prompt; the empty
one here) rescales the guided prediction of each packed token to the norm of the conditional one's:
`combine_guidance` does the same, so the sampler's CFG is the pipeline's. The defaults sample without guidance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from solrl_core.models.backbones.base import Conditioning, module_device
from solrl_core.models.backbones.diffusers_pipeline import DiffusersPipelineBackbone
from solrl_core.models.backbones.specs.qwenimage import SPEC
from solrl_core.errors import SolrlError


def _token_norms(v: torch.Tensor) -> torch.Tensor:
    """The norm of each packed token of latents (B, C, H, W): its 2x2 patch of every channel, (B, 1, H/2, 1, W/2, 1)."""
    b, c, h, w = v.shape
    return torch.linalg.vector_norm(v.reshape(b, c, h // 2, 2, w // 2, 2), dim=(1, 3, 5), keepdim=True)


class QwenImageBackbone(DiffusersPipelineBackbone):
    name = "qwenimage"
    defaults = SPEC.defaults
    pipeline_class = "QwenImagePipeline"
    title = "Qwen-Image"
    text_encoder_names = ("text_encoder",)

    @classmethod
    def meta_inputs(cls, config: dict, image_tokens: int, text_tokens: int, batch: int = 1) -> dict:
        grid = math.isqrt(image_tokens)  # a square image: grid x grid packed latent patches, one frame
        return dict(
            hidden_states=torch.randn(batch, image_tokens, config["in_channels"]),
            encoder_hidden_states=torch.randn(batch, text_tokens, config["joint_attention_dim"]),
            timestep=torch.ones(batch),
            img_shapes=[[(1, grid, grid)]] * batch,
        )

    @property
    def latent_channels(self) -> int:
        return self.transformer.config.in_channels // 4  # the transformer sees 2x2-packed latents

    def schedule_input(self, steps: int) -> np.ndarray:
        """Uniform sigmas 1 .. 1/steps, which the scheduler shifts (mu from the image sequence length):
        QwenImagePipeline's schedule."""
        return np.linspace(1.0, 1.0 / steps, steps)

    def sigmas(self, steps: int) -> list[float]:
        """The pipeline's sigmas; with the release's shift_terminal a one-step schedule is 0 / 0 (NaN in the
        pipeline too), so at least 2 steps are required."""
        if steps == 1 and self.scheduler_config.get("shift_terminal"):
            raise SolrlError("Qwen-Image's schedule (shift_terminal) needs at least 2 steps: set the steps >= 2")
        return super().sigmas(steps)

    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str]) -> Conditioning:
        """Qwen2.5-VL hidden states (B, max_sequence_length, width) from the pipeline's `encode_prompt`, zero-padded,
        and their attention mask (B, max_sequence_length), 1 on the prompt's tokens."""
        self.require_text_encoders()
        embeds, mask = self.pipe.encode_prompt(
            prompt=list(prompts), device=self.device, max_sequence_length=self.max_sequence_length
        )
        return self.padded_text(embeds, mask)

    def padded_text(self, embeds: torch.Tensor, mask: torch.Tensor | None) -> Conditioning:
        """The pipeline's text encoding zero-padded to max_sequence_length, with its mask (1 on the tokens)."""
        if mask is None:  # the pipeline drops an all-ones mask
            mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=embeds.device)
        pad = self.max_sequence_length - embeds.shape[1]
        return {
            "encoder_hidden_states": torch.nn.functional.pad(embeds, (0, 0, 0, pad)),
            "encoder_hidden_states_mask": torch.nn.functional.pad(mask, (0, pad)),
        }

    def velocity(
        self,
        transformer: torch.nn.Module,
        x_t: torch.Tensor,
        sigma: torch.Tensor,
        cond: Conditioning,
        guidance: float = 1.0,
    ) -> torch.Tensor:
        pipe = type(self.pipe)  # the packing helpers are static methods of QwenImagePipeline
        b, c, h, w = x_t.shape
        dtype, device = transformer.dtype, module_device(transformer)
        tokens, shapes = self.image_tokens(pipe._pack_latents(x_t.to(device=device, dtype=dtype), b, c, h, w),
                                           [(1, h // 2, w // 2)], cond)
        out = transformer(
            hidden_states=tokens,
            timestep=sigma.to(device=device, dtype=dtype).reshape(-1).expand(b),  # the pipeline's t / 1000
            guidance=None,
            encoder_hidden_states=cond["encoder_hidden_states"].to(device=device, dtype=dtype),
            encoder_hidden_states_mask=cond["encoder_hidden_states_mask"].to(device),
            img_shapes=[shapes] * b,
            return_dict=False,
        )[0][:, : (h // 2) * (w // 2)]  # the generated image's tokens (an editing model's source tokens follow)
        scale = self.pipe.vae_scale_factor
        return pipe._unpack_latents(out, h * scale, w * scale, scale)[:, :, 0].to(x_t.dtype)

    def combine_guidance(self, v_uncond: torch.Tensor, v_cond: torch.Tensor, guidance: float) -> torch.Tensor:
        """v_u + g (v_c - v_u), each packed token (a 2x2 patch of every channel) rescaled to v_c's norm there, as
        QwenImagePipeline's and QwenImageEditPipeline's true CFG."""
        guided = v_uncond + guidance * (v_cond - v_uncond)
        b, c, h, w = guided.shape
        ratio = _token_norms(v_cond) / _token_norms(guided)
        return (guided.reshape(b, c, h // 2, 2, w // 2, 2) * ratio).reshape(b, c, h, w)

    def image_tokens(self, packed: torch.Tensor, shapes: list[tuple[int, int, int]], cond: Conditioning
                     ) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
        """The image token sequence the transformer reads and its per-image (frames, rows, columns), from the packed
        latents and their shape (Qwen-Image: those; an editing model appends its source's)."""
        return packed, shapes

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> np.ndarray:
        """Un-normalise with the VAE's latents_mean / latents_std, decode the one-frame latent `model.decode_chunk`
        at a time and post-process as QwenImagePipeline does; uint8 (B, H, W, 3)."""
        vae = self.vae
        shape = (1, vae.config.z_dim, 1, 1, 1)
        mean = torch.tensor(vae.config.latents_mean, device=vae.device, dtype=vae.dtype).view(shape)
        std = torch.tensor(vae.config.latents_std, device=vae.device, dtype=vae.dtype).view(shape)
        images = []
        for chunk in latents.split(self.decode_chunk):
            z = chunk.to(device=vae.device, dtype=vae.dtype)[:, :, None] * std + mean
            image = vae.decode(z, return_dict=False)[0][:, :, 0]
            images.append(self.pipe.image_processor.postprocess(image, output_type="np"))
        return (np.concatenate(images) * 255).round().astype(np.uint8)
