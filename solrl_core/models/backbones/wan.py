"""Backbone adapter of Wan 2.1 text-to-video through diffusers' WanPipeline (and of Wan2.2-TI2V-5B's text-to-video,
one transformer on its own 16x VAE, whose per-token timesteps are the step's time on every token in text-to-video).

A sample is a video: its latent is the Wan VAE's (16, 1 + (frames - 1) / 4, H / 8, W / 8), the transformer
patchifies it itself (1 x 2 x 2 patches), and `decode` gives (B, frames, H, W, 3) uint8 frames. The timestep goes in
on the scheduler's 0..1000 scale, as WanPipeline's denoising loop passes it. The schedule is the model's scheduler's
own (Wan ships UniPC on flow sigmas with its flow_shift), so the sigmas are those WanPipeline samples on. No
classifier-free guidance here: the sampler combines the conditional and unconditional (empty prompt: WanPipeline's
default negative prompt) velocities itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from solrl_core.errors import SolrlError
from solrl_core.models.backbones.base import Conditioning
from solrl_core.models.backbones.diffusers_pipeline import DiffusersPipelineBackbone
from solrl_core.models.backbones.registry import frames_problem
from solrl_core.models.backbones.specs.wan import SPEC


class WanBackbone(DiffusersPipelineBackbone):
    name = "wan"
    defaults = SPEC.defaults
    pipeline_class = "WanPipeline"
    title = "Wan 2.1"
    text_encoder_names = ("text_encoder",)

    def __init__(self, pipe, model):
        if getattr(pipe, "transformer_2", None) is not None and type(self) is WanBackbone:
            raise SolrlError(f"model.path {model.path} has two experts (Wan 2.2 A14B: transformer for high noise, "
                             f"transformer_2 for low); set model.kind: wan22")
        self.frames = model.frames or SPEC.defaults.frames
        problem = frames_problem(SPEC, self.frames)
        if problem or pipe.vae_scale_factor_temporal != SPEC.temporal_compression:
            raise SolrlError(problem or f"model.path {model.path}: its VAE compresses {pipe.vae_scale_factor_temporal} "
                             f"frames into one, Wan 2.1's {SPEC.temporal_compression}")
        super().__init__(pipe, model)

    @classmethod
    def meta_inputs(cls, config: dict, image_tokens: int, text_tokens: int, batch: int = 1) -> dict:
        """A video latent of `image_tokens` patches: the fewest latent frames of square grids that hold them (the
        planner's counts are a side squared times the latent frames). A forward's FLOPs and memory depend on the
        count alone (the attention is over all of a video's tokens; its 3D rotary embedding is elementwise)."""
        frames = next(f for f in range(1, image_tokens + 1)
                      if image_tokens % f == 0 and math.isqrt(image_tokens // f) ** 2 == image_tokens // f)
        side = math.isqrt(image_tokens // frames)
        pt, ph, pw = config["patch_size"]
        return dict(
            hidden_states=torch.randn(batch, config["in_channels"], frames * pt, side * ph, side * pw),
            encoder_hidden_states=torch.randn(batch, text_tokens, config["text_dim"]),
            timestep=torch.ones(batch),
        )

    @property
    def patch(self) -> int:
        """Latent pixels per token side (the transformer's patches are 1 frame x 2 x 2)."""
        return self.transformer.config.patch_size[-1]

    def check_resolution(self) -> None:
        multiple = self.pipe.vae_scale_factor_spatial * self.patch
        if self.resolution % multiple:
            raise SolrlError(f"model.resolution {self.resolution} must be a multiple of {multiple} for {self.title} "
                             f"(VAE factor {self.pipe.vae_scale_factor_spatial}, {self.patch}x{self.patch} patches)")

    @property
    def latent_frames(self) -> int:
        return (self.frames - 1) // self.pipe.vae_scale_factor_temporal + 1

    @property
    def latent_shape(self) -> tuple[int, ...]:
        side = self.resolution // self.pipe.vae_scale_factor_spatial
        return (self.latent_channels, self.latent_frames, side, side)

    def sigmas(self, steps: int) -> list[float]:
        """The sigmas of the model's scheduler (its class and config, e.g. UniPC on flow sigmas with flow_shift 3)
        after `set_timesteps(steps)`, terminal excluded: what WanPipeline samples on."""
        import diffusers

        if steps < 1:
            raise ValueError("steps must be >= 1")
        config = self.scheduler_config
        scheduler = getattr(diffusers, config.get("_class_name", "FlowMatchEulerDiscreteScheduler")).from_config(config)
        scheduler.set_timesteps(steps)
        return [float(s) for s in scheduler.sigmas[:-1]]

    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str]) -> Conditioning:
        """UMT5 hidden states (B, max_sequence_length, width), zero past each prompt's tokens, from the pipeline's
        `encode_prompt` without CFG."""
        self.require_text_encoders()
        embeds, _ = self.pipe.encode_prompt(prompt=list(prompts), negative_prompt=None,
                                            do_classifier_free_guidance=False,
                                            max_sequence_length=self.max_sequence_length, device=self.device)
        return {"encoder_hidden_states": embeds}

    def velocity(
        self,
        transformer: torch.nn.Module,
        x_t: torch.Tensor,
        sigma: torch.Tensor,
        cond: Conditioning,
        guidance: float = 1.0,
    ) -> torch.Tensor:
        """The transformer's output (the flow velocity eps - x0) as WanPipeline's denoising loop calls it."""
        return self.scheduler_time_velocity(transformer, x_t, sigma, cond)  # encoder_hidden_states

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> np.ndarray:
        """Frames as uint8 (B, frames, H, W, 3): the latents un-normalised with the VAE's per-channel mean and std,
        decoded `model.decode_chunk` samples at a time, post-processed as WanPipeline does (output_type "np")."""
        vae = self.vae
        channels = vae.config.z_dim
        mean = torch.tensor(vae.config.latents_mean).view(1, channels, 1, 1, 1)
        std = torch.tensor(vae.config.latents_std).view(1, channels, 1, 1, 1)
        videos = []
        for chunk in latents.split(self.decode_chunk):
            z = chunk.to(device=vae.device, dtype=vae.dtype)
            z = z * std.to(z.device, z.dtype) + mean.to(z.device, z.dtype)
            video = vae.decode(z, return_dict=False)[0]
            videos.append(self.pipe.video_processor.postprocess_video(video, output_type="np"))
        return (np.concatenate(videos) * 255).round().astype(np.uint8)
