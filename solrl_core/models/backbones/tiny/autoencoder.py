"""The tiny AutoencoderKL shared by the tiny FLUX.1 and SD3.5 directories.

Both real VAEs are the same architecture (4 down/up blocks, spatial compression 8, 16 latent channels, no quant
convs, attention in the mid block) and differ only in their latent normalisation, which `autoencoder_kl` takes as
arguments: FLUX.1 scaling 0.3611 / shift 0.1159, SD3.5 scaling 1.5305 / shift 0.0609.
"""

from __future__ import annotations

import torch

LATENT_CHANNELS = 16


def autoencoder_kl(scaling_factor: float, shift_factor: float, seed: int = 0):
    """AutoencoderKL with the real block layout (vae scale factor 2**3 = 8) and toy widths 16-32, one layer per
    block; every Linear (mid-block attention) 32 wide."""
    from diffusers import AutoencoderKL

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            block_out_channels=(16, 16, 32, 32),
            layers_per_block=1,
            act_fn="silu",
            latent_channels=LATENT_CHANNELS,
            norm_num_groups=8,
            sample_size=1024,
            scaling_factor=scaling_factor,
            shift_factor=shift_factor,
            force_upcast=True,
            use_quant_conv=False,
            use_post_quant_conv=False,
            mid_block_add_attention=True,
        ).eval()
