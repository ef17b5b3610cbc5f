"""A tiny random-weight Wan 2.1 text-to-video diffusers directory: the Wan2.1-T2V architecture with toy widths,
written offline.

`make_tiny_wan(out_dir)` saves a `WanPipeline` (model_index.json, transformer/, vae/, text_encoder/, tokenizer/,
scheduler/) that `model.path` can point at (`model.kind: wan`); `make_tiny_wan22(out_dir)` the same with
Wan2.2-T2V-A14B's second expert (`transformer_2`, the low-noise steps) and boundary_ratio (`model.kind: wan22`).

| part | real Wan2.1-T2V-1.3B | here |
|---|---|---|
| transformer | WanTransformer3DModel, 30 blocks, 12 heads x 128 (width 1536), FFN 8960, patch 1x2x2, UMT5 4096 | 2 blocks, 2 heads x 16 (width 32), FFN 64, patch 1x2x2, text 64; every Linear a multiple of 16 wide |
| vae | AutoencoderKLWan, causal 3D, 4x temporal and 8x spatial compression, 16 latent channels, per-channel mean/std | the same layout, mean/std and compression, base width 8 |
| text_encoder / tokenizer | UMT5EncoderModel (umt5-xxl encoder, 4096), T5TokenizerFast | UMT5EncoderModel 2 layers, width 64; T5TokenizerFast over a unigram trained here (tiny/text.py) |
| scheduler | UniPCMultistepScheduler on flow sigmas, flow_shift 3.0 (480p) | the same config |

Weights come from fixed seeds, so two calls write identical files.
"""

from __future__ import annotations

from pathlib import Path

import torch

from solrl_core.models.backbones.diffusers_pipeline import quiet_hf
from solrl_core.models.backbones.tiny import text

SEED = 0
TEXT_WIDTH = 64  # text_dim of the transformer = the encoder's d_model
LATENT_CHANNELS = 16  # z_dim of Wan's VAE

# Wan2.1-T2V's scheduler/scheduler_config.json: UniPC on flow sigmas, flow_shift 3.0 for 480p (5.0 for 720p), as
# diffusers' WanPipeline documents it (pipelines/wan/pipeline_wan.py)
SCHEDULER_CONFIG = dict(num_train_timesteps=1000, prediction_type="flow_prediction", use_flow_sigmas=True,
                        flow_shift=3.0, solver_order=2, solver_type="bh2")


def tiny_transformer(seed: int = SEED):
    from diffusers import WanTransformer3DModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return WanTransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=16,
            in_channels=LATENT_CHANNELS,
            out_channels=LATENT_CHANNELS,
            text_dim=TEXT_WIDTH,
            freq_dim=32,
            ffn_dim=64,
            num_layers=2,
            rope_max_seq_len=64,
        ).eval()


def tiny_vae(seed: int = SEED):
    """AutoencoderKLWan with the real compression (3 spatial halvings, 2 temporal) and toy widths."""
    from diffusers import AutoencoderKLWan

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoencoderKLWan(base_dim=8, z_dim=LATENT_CHANNELS, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                                temperal_downsample=[False, True, True]).eval()


def tiny_text_encoder(tokenizer, seed: int = SEED):
    """A 2-layer UMT5 encoder (T5 v1.1's gated-GELU feed-forward, per-layer relative attention bias) for
    `tokenizer`."""
    from transformers import UMT5Config, UMT5EncoderModel

    config = UMT5Config(vocab_size=len(tokenizer), d_model=TEXT_WIDTH, d_kv=16, d_ff=128, num_layers=2,
                        num_heads=4, feed_forward_proj="gated-gelu", pad_token_id=tokenizer.pad_token_id,
                        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return UMT5EncoderModel(config).eval()


def make_tiny_wan(out_dir: str | Path) -> Path:
    """Write the tiny Wan 2.1 diffusers directory into `out_dir` and return it."""
    return _save_tiny_pipeline(out_dir)


BOUNDARY_RATIO = 0.875  # Wan2.2-T2V-A14B's model_index.json (Wan-Video/Wan2.2 wan/configs/wan_t2v_A14B.py: boundary)


def make_tiny_wan22(out_dir: str | Path) -> Path:
    """Write a tiny Wan2.2-T2V-A14B directory into `out_dir`: the tiny Wan 2.1 pipeline with a second expert of the
    same layout (`transformer_2`, other weights) and A14B's boundary_ratio; return it."""
    return _save_tiny_pipeline(out_dir, transformer_2=tiny_transformer(SEED + 3), boundary_ratio=BOUNDARY_RATIO)


def _save_tiny_pipeline(out_dir: str | Path, **extra) -> Path:
    """The tiny WanPipeline (with `extra` components or settings) saved into `out_dir`."""
    from diffusers import UniPCMultistepScheduler, WanPipeline

    out = Path(out_dir)
    tokenizer = text.t5_tokenizer()
    pipe = WanPipeline(
        tokenizer=tokenizer,
        text_encoder=tiny_text_encoder(tokenizer, SEED + 2),
        vae=tiny_vae(SEED + 1),
        scheduler=UniPCMultistepScheduler(**SCHEDULER_CONFIG),
        transformer=tiny_transformer(SEED),
        **extra,
    )
    with quiet_hf():
        pipe.save_pretrained(out, safe_serialization=True)
    return out
