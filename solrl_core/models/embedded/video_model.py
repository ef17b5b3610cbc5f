"""The embedded text-to-video model: the embedded model's text encoder and tokenizer (over the motion grammar's words)
beside a small pixel-space Wan transformer (diffusers WanTransformer3DModel: 3D rotary positions, self-attention over
every frame's tokens, cross-attention to the prompt).

A sample is a video of `frames` frames; its "latent" is the video itself, 3 x frames x R x R pixels in [-1, 1], cut
into 1 x PATCH x PATCH patches: a 4-frame 32x32 video is 4 x 16 = 64 tokens, as many as the image model's 32x32
image. Saved as the image model is (solrl_core/models/embedded/model.py), with `frames` in its metadata.

The prompt's direction reaches each place through the input (`position_channels`). Through cross-attention alone a
word changes every token alike to first order, which averages out over a world where "right" and "left" are
mirror images; the model never learned its direction words that way (docs/lab/video-world-2026-11-30b.md). So the
transformer also sees the frame, row and column of every pixel, and frame x column and frame x row each scaled by one
of the two numbers the text encoder's projection makes of the pooled prompt (`CLIPTextModelWithProjection`,
projection_dim 2, trained with the rest): a word that sets a scale moves the input in proportion to how far along the
clip and across the frame a pixel is.
"""

from __future__ import annotations

import numpy as np
import torch
from diffusers import WanTransformer3DModel
from transformers import CLIPTextModelWithProjection

from solrl_core.errors import SolrlError
from solrl_core.models.backbones.specs.embedded_video import WIDTH
from solrl_core.worlds import motion
from solrl_core.models.embedded.model import TEXT_WIDTH, EmbeddedModel, build_tokenizer, text_encoder_config

PATCH = 8
HEAD_DIM = 32
VIDEO_CHANNELS = 3
TEXT_SCALES = 2  # the text encoder's projection: the scales of frame x column and frame x row (`position_channels`)
POSITION_CHANNELS = 3 + TEXT_SCALES  # frame, row, column, then the two text-scaled products


def transformer_config(resolution: int = 32) -> dict:
    """WanTransformer3DModel kwargs: the image model's depth, WIDTH wide (6 heads of 32); every Linear a multiple of 16
    wide (NVFP4)."""
    if resolution % PATCH:
        raise SolrlError(f"resolution must be a multiple of {PATCH}, got {resolution}")
    return dict(
        patch_size=(1, PATCH, PATCH),
        num_attention_heads=WIDTH // HEAD_DIM,
        attention_head_dim=HEAD_DIM,
        in_channels=VIDEO_CHANNELS + POSITION_CHANNELS,  # the video and its `position_channels`
        out_channels=VIDEO_CHANNELS,
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
        config = text_encoder_config(tokenizer)
        config.projection_dim = TEXT_SCALES
        text_encoder = CLIPTextModelWithProjection(config)
        transformer = WanTransformer3DModel(**transformer_config(resolution))
    return EmbeddedModel(transformer.eval(), text_encoder.eval(), tokenizer, resolution, frames=frames)


def position_channels(x_t: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(B, POSITION_CHANNELS, F, H, W) for videos x_t (B, C, F, H, W) and the prompts' scales (B, TEXT_SCALES): the
    frame index, the row and the column, each from -1 (first) to 1 (last), then frame x column times scales[:, 0] and
    frame x row times scales[:, 1]; in x_t's dtype on its device (no host transfer)."""
    b, _, f, h, w = x_t.shape
    axes = [torch.linspace(-1.0, 1.0, n, device=x_t.device, dtype=x_t.dtype) for n in (f, h, w)]
    frame, row, column = (a.expand(b, -1, -1, -1) for a in torch.meshgrid(*axes, indexing="ij"))
    scales = scales.to(x_t.dtype).view(b, TEXT_SCALES, 1, 1, 1)
    moving = torch.stack([frame * column, frame * row], dim=1) * scales
    return torch.cat([torch.stack([frame, row, column], dim=1), moving], dim=1)


def check_input_channels(transformer: torch.nn.Module) -> None:
    """SolrlError (one line) unless the transformer takes the video and its position channels (weights saved before
    the position channels take 3); a wrapper without a diffusers config is not checked."""
    found = getattr(getattr(transformer, "config", None), "in_channels", None)
    if found is not None and found != VIDEO_CHANNELS + POSITION_CHANNELS:
        raise SolrlError(f"embedded video model: its transformer takes {found} input channels, this solrl's takes "
                         f"{VIDEO_CHANNELS + POSITION_CHANNELS} (the video and its position channels); pretrain it "
                         f"again with `solrl pretrain --world motion --out DIR`")


def predict_video_velocity(transformer: torch.nn.Module, x_t: torch.Tensor, sigma: torch.Tensor,
                           cond: dict) -> torch.Tensor:
    """The transformer's output at noise level sigma in [0, 1] (timestep = 1000 sigma, fp32): the velocity eps - x0,
    in x_t's dtype (as `model.predict_velocity`). The transformer sees x_t with its `position_channels`, scaled by
    the prompts' `pooled_projections`; every caller (pretraining, the backbone) goes through here."""
    dtype = transformer.dtype
    timestep = (sigma.to(torch.float32) * 1000.0).expand(x_t.shape[0])
    inputs = torch.cat([x_t, position_channels(x_t, cond["pooled_projections"])], dim=1)
    out = transformer(hidden_states=inputs.to(dtype), encoder_hidden_states=cond["encoder_hidden_states"].to(dtype),
                      timestep=timestep, return_dict=False)[0]
    return out.to(x_t.dtype)


def videos_to_latents(videos: np.ndarray) -> torch.Tensor:
    """uint8 (B, F, H, W, 3) -> float (B, 3, F, H, W) in [-1, 1]."""
    return torch.from_numpy(np.asarray(videos)).permute(0, 4, 1, 2, 3).float() / 127.5 - 1.0


def latents_to_videos(latents: torch.Tensor) -> np.ndarray:
    """float (B, 3, F, H, W) in [-1, 1] -> uint8 (B, F, H, W, 3) (clamped, rounded)."""
    pixels = ((latents.detach().float().clamp(-1, 1) + 1) * 127.5).round()
    return pixels.permute(0, 2, 3, 4, 1).to(torch.uint8).cpu().numpy()
