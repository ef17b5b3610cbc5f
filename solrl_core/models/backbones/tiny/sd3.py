"""Tiny random-weight SD3.5-Large / SD3.5-Medium diffusers directories: the real architectures with toy widths.

`make_tiny_sd35l(out_dir)` / `make_tiny_sd35m(out_dir)` save a `StableDiffusion3Pipeline` (model_index.json,
transformer/, vae/, text_encoder/, tokenizer/, text_encoder_2/, tokenizer_2/, text_encoder_3/, tokenizer_3/,
scheduler/) that `model.path` can point at (`model.kind: sd35`).

| part | real SD3.5-Large / -Medium | here |
|---|---|---|
| transformer | SD3Transformer2DModel, patch 2, 16 latent channels, qk RMSNorm; L: 38 layers of 38x64; M: 24 layers of 24x64, the first 13 with dual attention (MMDiT-X); caption projection = width; pooled 2048; T5 4096 | 2 layers of 2x16, patch 2, 16 latent channels, qk RMSNorm; M: dual attention in layer 0 (the first half, as the real M); caption projection 32; pooled 80; T5 96; every Linear a multiple of 16 wide |
| vae | AutoencoderKL, f8, 16 latent channels, scaling 1.5305, shift 0.0609 | same layout and factors, widths 16-32 (tiny/autoencoder.py) |
| text_encoder / tokenizer | CLIPTextModelWithProjection (CLIP-L, 768), CLIPTokenizer | 2 layers, width 32, projection 32; CLIPTokenizer over a BPE trained here (tiny/text.py) |
| text_encoder_2 / tokenizer_2 | CLIPTextModelWithProjection (CLIP-G, 1280), CLIPTokenizer padding with "!" | 2 layers, width 48, projection 48; the same tokenizer padding with "!" |
| text_encoder_3 / tokenizer_3 | T5EncoderModel (v1.1 XXL, 4096), T5TokenizerFast | T5EncoderModel 2 layers, width 96; T5TokenizerFast over a unigram trained here |
| scheduler | FlowMatchEulerDiscreteScheduler, shift 3.0 | the same config |

The widths keep SD3's wiring visible: CLIP-L (32) and CLIP-G (48) hidden states are concatenated (80) and zero-padded
to the T5 width (96) along features, the pooled outputs give pooled_projection_dim 80. Weights come from fixed seeds,
so two calls write identical files.
"""

from __future__ import annotations

from pathlib import Path

import torch

from solrl_core.models.backbones.diffusers_pipeline import quiet_hf
from solrl_core.models.backbones.tiny import text
from solrl_core.models.backbones.tiny.autoencoder import LATENT_CHANNELS, autoencoder_kl

SEED = 0
CLIP_L_WIDTH = 32
CLIP_G_WIDTH = 48
T5_WIDTH = 96  # joint_attention_dim; >= CLIP_L_WIDTH + CLIP_G_WIDTH, as in SD3 (4096 >= 768 + 1280)
VAE_SCALING_FACTOR = 1.5305  # SD3.5's VAE
VAE_SHIFT_FACTOR = 0.0609
SCHEDULER_CONFIG = dict(num_train_timesteps=1000, shift=3.0)  # SD3.5's scheduler/scheduler_config.json


def tiny_transformer(dual_attention_layers: tuple[int, ...] = (), seed: int = SEED):
    from diffusers import SD3Transformer2DModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return SD3Transformer2DModel(
            sample_size=128,  # the real 1024 px default (latent 128)
            patch_size=2,
            in_channels=LATENT_CHANNELS,
            out_channels=LATENT_CHANNELS,
            num_layers=2,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=T5_WIDTH,
            caption_projection_dim=32,  # = the transformer width, as in SD3.5-L (2432) and -M (1536)
            pooled_projection_dim=CLIP_L_WIDTH + CLIP_G_WIDTH,
            pos_embed_max_size=64,  # latents up to 128 x 128 (1024 px) with patch 2
            dual_attention_layers=dual_attention_layers,
            qk_norm="rms_norm",
        ).eval()


def _make_tiny_sd3(out_dir: str | Path, dual_attention_layers: tuple[int, ...]) -> Path:
    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline

    out = Path(out_dir)
    clip_l_tok, clip_g_tok, t5_tok = text.clip_tokenizer(), text.clip_tokenizer(pad_token="!"), text.t5_tokenizer()
    pipe = StableDiffusion3Pipeline(
        transformer=tiny_transformer(dual_attention_layers, SEED),
        scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG),
        vae=autoencoder_kl(VAE_SCALING_FACTOR, VAE_SHIFT_FACTOR, seed=SEED + 1),
        text_encoder=text.clip_text_encoder(clip_l_tok, CLIP_L_WIDTH, CLIP_L_WIDTH, seed=SEED + 2),
        tokenizer=clip_l_tok,
        text_encoder_2=text.clip_text_encoder(clip_g_tok, CLIP_G_WIDTH, CLIP_G_WIDTH, seed=SEED + 3),
        tokenizer_2=clip_g_tok,
        text_encoder_3=text.t5_encoder(t5_tok, T5_WIDTH, seed=SEED + 4),
        tokenizer_3=t5_tok,
    )
    with quiet_hf():
        pipe.save_pretrained(out, safe_serialization=True)
    return out


def make_tiny_sd35l(out_dir: str | Path) -> Path:
    """Write the tiny SD3.5-Large directory (plain joint-attention layers) into `out_dir` and return it."""
    return _make_tiny_sd3(out_dir, dual_attention_layers=())


def make_tiny_sd35m(out_dir: str | Path) -> Path:
    """Write the tiny SD3.5-Medium directory (MMDiT-X: dual attention in the first half of the layers, as the real
    config's layers 0-12 of 24) into `out_dir` and return it."""
    return _make_tiny_sd3(out_dir, dual_attention_layers=(0,))
