"""A tiny random-weight FLUX.1 diffusers directory: the FLUX.1-dev architecture with toy widths, written offline.

`make_tiny_flux(out_dir)` saves a `FluxPipeline` (`make_tiny_flux_kontext`: the same components as a
`FluxKontextPipeline`, FLUX.1 Kontext's) (model_index.json, transformer/, vae/, text_encoder/, tokenizer/,
text_encoder_2/, tokenizer_2/, scheduler/) that `model.path` can point at (`model.kind: flux1`).

| part | real FLUX.1-dev | here |
|---|---|---|
| transformer | FluxTransformer2DModel, 19 double + 38 single blocks, 24 heads x 128, rope axes 16/56/56, in 64 (16 latent channels packed 2x2), T5 4096, pooled 768, guidance embedding | 1 double + 1 single block, 2 heads x 16, rope axes 4/6/6, in 64, T5 64, pooled 32, guidance embedding; every Linear a multiple of 16 wide |
| vae | AutoencoderKL, f8, 16 latent channels, scaling 0.3611, shift 0.1159 | same layout and factors, widths 16-32 (tiny/autoencoder.py) |
| text_encoder / tokenizer | CLIPTextModel (CLIP-L, 768), CLIPTokenizer | CLIPTextModel 2 layers, width 32; CLIPTokenizer over a BPE trained here (tiny/text.py) |
| text_encoder_2 / tokenizer_2 | T5EncoderModel (v1.1 XXL, 4096), T5TokenizerFast | T5EncoderModel 2 layers, width 64; T5TokenizerFast over a unigram trained here |
| scheduler | FlowMatchEulerDiscreteScheduler, dynamic shift (base 0.5, max 1.15, seq len 256..4096) | the same config |

Weights come from fixed seeds, so two calls write identical files.
"""

from __future__ import annotations

from pathlib import Path

import torch

from solrl_core.models.backbones.diffusers_pipeline import quiet_hf
from solrl_core.models.backbones.tiny import text
from solrl_core.models.backbones.tiny.autoencoder import LATENT_CHANNELS, autoencoder_kl

SEED = 0
CLIP_WIDTH = 32  # pooled_projection_dim = CLIP-L's pooled output width
T5_WIDTH = 64  # joint_attention_dim
VAE_SCALING_FACTOR = 0.3611  # FLUX.1's VAE
VAE_SHIFT_FACTOR = 0.1159

SCHEDULER_CONFIG = dict(  # FLUX.1-dev's scheduler/scheduler_config.json
    num_train_timesteps=1000,
    shift=3.0,
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=1.15,
    base_image_seq_len=256,
    max_image_seq_len=4096,
)


def tiny_transformer(seed: int = SEED):
    from diffusers import FluxTransformer2DModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return FluxTransformer2DModel(
            patch_size=1,
            in_channels=4 * LATENT_CHANNELS,  # 2x2 packed latent patches
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=T5_WIDTH,
            pooled_projection_dim=CLIP_WIDTH,
            guidance_embeds=True,
            axes_dims_rope=(4, 6, 6),
        ).eval()


def make_tiny_flux(out_dir: str | Path, pipeline_class: str = "FluxPipeline") -> Path:
    """Write the tiny FLUX.1 diffusers directory (a `pipeline_class` of the FLUX.1 components) into `out_dir` and
    return it."""
    import diffusers
    from diffusers import FlowMatchEulerDiscreteScheduler

    out = Path(out_dir)
    clip_tok, t5_tok = text.clip_tokenizer(), text.t5_tokenizer()
    pipe = getattr(diffusers, pipeline_class)(
        scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG),
        vae=autoencoder_kl(VAE_SCALING_FACTOR, VAE_SHIFT_FACTOR, seed=SEED + 1),
        text_encoder=text.clip_text_encoder(clip_tok, CLIP_WIDTH, seed=SEED + 2),
        tokenizer=clip_tok,
        text_encoder_2=text.t5_encoder(t5_tok, T5_WIDTH, seed=SEED + 3),
        tokenizer_2=t5_tok,
        transformer=tiny_transformer(SEED),
    )
    with quiet_hf():
        pipe.save_pretrained(out, safe_serialization=True)
    return out


def make_tiny_flux_kontext(out_dir: str | Path) -> Path:
    """The tiny FLUX.1 as a FluxKontextPipeline (FLUX.1 Kontext's components are FLUX.1-dev's)."""
    return make_tiny_flux(out_dir, "FluxKontextPipeline")
