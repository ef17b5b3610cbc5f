"""The embedded text-to-video model: the embedded model's text encoder and tokenizer (over the motion grammar's words)
beside a small pixel-space Wan transformer (diffusers WanTransformer3DModel: 3D rotary positions, self-attention over
every frame's tokens, cross-attention to the prompt).

A sample is a video of `frames` frames; its "latent" is the video itself, 3 x frames x R x R pixels in [-1, 1], cut
into 1 x PATCH x PATCH patches: a 4-frame 32x32 video is 4 x 16 = 64 tokens, as many as the image model's 32x32
image. Saved as the image model is (solrl_core/models/embedded/model.py), with `frames` in its metadata.

Absolute coordinates: Wan has only rotary (relative) positions and a stride = kernel patch embedding, so on pure noise
(sigma = 1) its prediction is translation-equivariant in expectation and it cannot put a shape at a frame-dependent
place (a shape "moving right" starts on the left in the motion world). The SD3 image model has an absolute
`pos_embed`; here the transformer gets COORD_CHANNELS more input channels instead (`in_channels` 6, `out_channels`
3): the frame index, the row and the column, each scaled to [-1, 1], a fixed grid that `predict_video_velocity`
concatenates to x_t (as the editing model's source channels, solrl_core/models/embedded/edit_model.py). Weights
without them (an `in_channels` of 3) are refused in one line.
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
VIDEO_CHANNELS = 3  # RGB: the latent is the video itself
COORD_CHANNELS = 3  # frame, row, column (`coordinate_grid`)


def transformer_config(resolution: int = 32) -> dict:
    """WanTransformer3DModel kwargs: the image model's depth, WIDTH wide (6 heads of 32); every Linear a multiple of 16
    wide (NVFP4)."""
    if resolution % PATCH:
        raise SolrlError(f"resolution must be a multiple of {PATCH}, got {resolution}")
    return dict(
        patch_size=(1, PATCH, PATCH),
        num_attention_heads=WIDTH // HEAD_DIM,
        attention_head_dim=HEAD_DIM,
        in_channels=VIDEO_CHANNELS + COORD_CHANNELS,  # the video and its coordinates (module docstring)
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
        text_encoder = CLIPTextModel(text_encoder_config(tokenizer))
        transformer = WanTransformer3DModel(**transformer_config(resolution))
    return EmbeddedModel(transformer.eval(), text_encoder.eval(), tokenizer, resolution, frames=frames)


def coordinate_grid(x_t: torch.Tensor) -> torch.Tensor:
    """The absolute coordinates of a batch of videos x_t (B, C, F, H, W): (B, COORD_CHANNELS, F, H, W), channel 0 the
    frame index, 1 the row, 2 the column, each linearly from -1 (first) to 1 (last) (-1 where there is one); on x_t's
    device and in its dtype (no host transfer), expanded over the batch (no copy)."""
    b, _, f, h, w = x_t.shape
    axes = [torch.linspace(-1.0, 1.0, n, device=x_t.device, dtype=x_t.dtype) for n in (f, h, w)]
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"))  # (3, F, H, W)
    return grid.unsqueeze(0).expand(b, -1, -1, -1, -1)


def check_coordinate_channels(transformer: torch.nn.Module, channels: int = VIDEO_CHANNELS) -> None:
    """SolrlError (one line) unless the transformer takes `channels` + COORD_CHANNELS inputs (weights saved before the
    coordinates take 3); a wrapper without a diffusers config is not checked."""
    found = getattr(getattr(transformer, "config", None), "in_channels", None)
    if found is not None and found != channels + COORD_CHANNELS:
        raise SolrlError(f"embedded video model: its transformer takes {found} input channels, expected "
                         f"{channels + COORD_CHANNELS} (the video and {COORD_CHANNELS} coordinate channels): weights "
                         f"from before the coordinates; re-run `solrl pretrain --world motion`")


def predict_video_velocity(transformer: torch.nn.Module, x_t: torch.Tensor, sigma: torch.Tensor,
                           cond: dict) -> torch.Tensor:
    """The transformer's output at noise level sigma in [0, 1] (timestep = 1000 sigma, fp32): the velocity eps - x0,
    in x_t's dtype (as `model.predict_velocity`). The transformer sees x_t with its `coordinate_grid` concatenated
    (the module docstring); every caller (pretraining, the backbone, the probes) goes through here."""
    check_coordinate_channels(transformer, x_t.shape[1])
    dtype = transformer.dtype
    timestep = (sigma.to(torch.float32) * 1000.0).expand(x_t.shape[0])
    hidden = torch.cat([x_t, coordinate_grid(x_t)], dim=1)
    out = transformer(hidden_states=hidden.to(dtype), encoder_hidden_states=cond["encoder_hidden_states"].to(dtype),
                      timestep=timestep, return_dict=False)[0]
    return out.to(x_t.dtype)


def videos_to_latents(videos: np.ndarray) -> torch.Tensor:
    """uint8 (B, F, H, W, 3) -> float (B, 3, F, H, W) in [-1, 1]."""
    return torch.from_numpy(np.asarray(videos)).permute(0, 4, 1, 2, 3).float() / 127.5 - 1.0


def latents_to_videos(latents: torch.Tensor) -> np.ndarray:
    """float (B, 3, F, H, W) in [-1, 1] -> uint8 (B, F, H, W, 3) (clamped, rounded)."""
    pixels = ((latents.detach().float().clamp(-1, 1) + 1) * 127.5).round()
    return pixels.permute(0, 2, 3, 4, 1).to(torch.uint8).cpu().numpy()
