"""The embedded text-to-video model: the embedded model's text encoder and tokenizer (over the motion grammar's words)
beside a small pixel-space Wan transformer (diffusers WanTransformer3DModel: 3D rotary positions, self-attention over
every frame's tokens, cross-attention to the prompt).

A sample is a video of `frames` frames; its "latent" is the video itself, 3 x frames x R x R pixels in [-1, 1], cut
into 1 x PATCH x PATCH patches: a 4-frame 32x32 video is 4 x 16 = 64 tokens, as many as the image model's 32x32
image. Saved as the image model is (solrl_core/models/embedded/model.py), with `frames` in its metadata.
"""

from __future__ import annotations

import numpy as np
import torch
from diffusers import WanTransformer3DModel
from transformers import CLIPTextModel

from solrl_core.errors import SolrlError
from solrl_core.models.backbones.specs.embedded_video import WIDTH
from solrl_core.worlds import motion
from solrl_core.models.embedded.model import TEXT_WIDTH, EmbeddedModel, build_tokenizer, text_encoder_config

PATCH = 8
HEAD_DIM = 32


def transformer_config(resolution: int = 32) -> dict:
    """WanTransformer3DModel kwargs: the image model's depth, WIDTH wide (6 heads of 32); every Linear a multiple of 16
    wide (NVFP4)."""
    if resolution % PATCH:
        raise SolrlError(f"resolution must be a multiple of {PATCH}, got {resolution}")
    return dict(
        patch_size=(1, PATCH, PATCH),
        num_attention_heads=WIDTH // HEAD_DIM,
        attention_head_dim=HEAD_DIM,
        in_channels=3,
        out_channels=3,
        text_dim=TEXT_WIDTH,
        freq_dim=64,
        ffn_dim=4 * WIDTH,
        num_layers=4,
        rope_max_seq_len=64,
    )


def build_video_model(resolution: int = 32, seed: int = 0, frames: int = motion.FRAMES) -> EmbeddedModel:
    """A randomly initialised video model (initialisation reproducible from `seed`)."""
    tokenizer = build_tokenizer(motion.all_prompts())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        text_encoder = CLIPTextModel(text_encoder_config(tokenizer))
        transformer = WanTransformer3DModel(**transformer_config(resolution))
    return EmbeddedModel(transformer.eval(), text_encoder.eval(), tokenizer, resolution, frames=frames)


def predict_video_velocity(transformer: torch.nn.Module, x_t: torch.Tensor, sigma: torch.Tensor,
                           cond: dict) -> torch.Tensor:
    """The transformer's output at noise level sigma in [0, 1] (timestep = 1000 sigma, fp32): the velocity eps - x0,
    in x_t's dtype (as `model.predict_velocity`)."""
    dtype = transformer.dtype
    timestep = (sigma.to(torch.float32) * 1000.0).expand(x_t.shape[0])
    out = transformer(hidden_states=x_t.to(dtype), encoder_hidden_states=cond["encoder_hidden_states"].to(dtype),
                      timestep=timestep, return_dict=False)[0]
    return out.to(x_t.dtype)


def videos_to_latents(videos: np.ndarray) -> torch.Tensor:
    """uint8 (B, F, H, W, 3) -> float (B, 3, F, H, W) in [-1, 1]."""
    return torch.from_numpy(np.asarray(videos)).permute(0, 4, 1, 2, 3).float() / 127.5 - 1.0


def latents_to_videos(latents: torch.Tensor) -> np.ndarray:
    """float (B, 3, F, H, W) in [-1, 1] -> uint8 (B, F, H, W, 3) (clamped, rounded)."""
    pixels = ((latents.detach().float().clamp(-1, 1) + 1) * 127.5).round()
    return pixels.permute(0, 2, 3, 4, 1).to(torch.uint8).cpu().numpy()
