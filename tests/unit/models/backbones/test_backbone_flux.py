"""FLUX.1 adapter on the tiny random-weight FLUX directory, checked against FluxPipeline's own calls."""

import json
import shutil

import numpy as np
import pytest
import torch
from diffusers import FluxPipeline

import backbone_checks as checks
from backbone_checks import PROMPTS, RES
from solrl_core.errors import SolrlError

MODEL_KIND = TINY_MODEL = "flux1"


def _one_pipeline_step(backbone, x, sigma, guidance, output_type):
    """FluxPipeline, one Euler step from sigma (shifted by its scheduler) to 0, starting from the plain latents x."""
    b, c, h, w = x.shape
    out = backbone.pipe(
        prompt=PROMPTS, height=RES, width=RES, num_inference_steps=1, sigmas=[sigma], guidance_scale=guidance,
        latents=FluxPipeline._pack_latents(x, b, c, h, w), output_type=output_type,
        max_sequence_length=backbone.max_sequence_length,
    ).images
    return out, float(backbone.pipe.scheduler.sigmas[0])


def test_tiny_directory_is_complete_small_and_seeded(tiny_dir, tmp_path, backbone):
    checks.assert_complete_and_small(tiny_dir, {
        "transformer": "FluxTransformer2DModel", "vae": "AutoencoderKL", "text_encoder": "CLIPTextModel",
        "tokenizer": "CLIPTokenizer", "text_encoder_2": "T5EncoderModel",
        "scheduler": "FlowMatchEulerDiscreteScheduler",
    })
    tokenizer_2 = json.loads((tiny_dir / "tokenizer_2" / "tokenizer_config.json").read_text())
    assert tokenizer_2["tokenizer_class"].startswith("T5")
    config = backbone.transformer.config
    assert (config.in_channels, config.guidance_embeds) == (64, True)
    assert sum(config.axes_dims_rope) == config.attention_head_dim
    assert config.joint_attention_dim == backbone.pipe.text_encoder_2.config.d_model
    assert config.pooled_projection_dim == backbone.pipe.text_encoder.config.hidden_size
    scheduler = backbone.pipe.scheduler.config  # FLUX.1-dev's values
    assert (scheduler.use_dynamic_shifting, scheduler.base_shift, scheduler.max_shift) == (True, 0.5, 1.15)
    assert (scheduler.base_image_seq_len, scheduler.max_image_seq_len) == (256, 4096)
    assert (backbone.vae.config.scaling_factor, backbone.vae.config.shift_factor) == (0.3611, 0.1159)
    checks.assert_made_again_alike(tiny_dir, TINY_MODEL, tmp_path, backbone)


def test_latents_noise_and_defaults(backbone):
    assert backbone.pipe.vae_scale_factor == 2 ** (len(backbone.vae.config.block_out_channels) - 1) == 8
    assert backbone.latent_shape == (16, RES // 8, RES // 8)
    assert backbone.image_seq_len == (RES // 16) ** 2
    checks.assert_noise_is_per_seed(backbone)
    d = backbone.defaults
    assert (d.sampler, d.resolution, d.distilled_guidance, d.quant_min_width) == ("dpmpp_2m", 512, True, 1000)
    # the reference (NVlabs/Sana): T5 length TEXT_ENCODER_MAX_SEQ_LEN of train_scripts/sol_rl/train_flux1.py, clip
    # train.max_grad_norm of configs/sol_rl/flux1.py
    assert (backbone.max_sequence_length, d.grad_clip) == (128, 1.0)


def test_encode_prompts(backbone):
    checks.assert_encoding_deterministic_and_batch_first(
        backbone, {"encoder_hidden_states": (2, 128, 64), "pooled_projections": (2, 32)}
    )


def test_velocity_matches_the_pipeline_step(backbone):
    x = backbone.initial_noise([5, 6])
    cond = backbone.encode_prompts(PROMPTS)
    for guidance in (1.0, 3.5):
        packed, sigma = _one_pipeline_step(backbone, x, 0.8, guidance, "latent")
        assert 0.8 < sigma < 1.0  # the dynamic shift (mu > 0) raises it
        stepped = FluxPipeline._unpack_latents(packed, RES, RES, 8)  # x + (0 - sigma) * v
        v = backbone.velocity(backbone.transformer, x, torch.full((2,), sigma), cond, guidance=guidance)
        torch.testing.assert_close(x - sigma * v, stepped, atol=1e-5, rtol=1e-5)
    v1 = backbone.velocity(backbone.transformer, x, torch.full((2,), 0.5), cond, guidance=1.0)
    v35 = backbone.velocity(backbone.transformer, x, torch.full((2,), 0.5), cond, guidance=3.5)
    assert not torch.allclose(v1, v35), "the distilled guidance input is ignored"
    checks.assert_velocity_batch_consistent(backbone, guidance=1.0)


def test_decode_matches_the_pipeline(backbone):
    x = backbone.initial_noise([7, 8])
    reference, sigma = _one_pipeline_step(backbone, x, 0.8, 1.0, "np")
    cond = backbone.encode_prompts(PROMPTS)
    x0 = x - sigma * backbone.velocity(backbone.transformer, x, torch.full((2,), sigma), cond)
    checks.assert_decode(backbone, x0, reference)


@pytest.mark.parametrize("resolution", [RES, 512])
def test_sigmas_are_the_pipeline_schedule(tiny_dir, resolution):
    """FluxPipeline's schedule, which the reference's `pipeline_with_logprob_flux` (NVlabs/Sana) computes the same
    way: uniform sigmas 1 .. 1/steps, shifted by the scheduler with mu linear in the image sequence length."""
    backbone = checks.load_tiny(MODEL_KIND, tiny_dir, resolution)
    # the reference's mu (FLUX.1-dev's scheduler values): 16 image tokens at 64 px, 1024 at the official 512 px
    mu = 0.5 + (backbone.image_seq_len - 256) * (1.15 - 0.5) / (4096 - 256)
    for steps in (1, 6, 10, 28):
        uniform = np.linspace(1.0, 1.0 / steps, steps)
        # the scheduler's exponential time shift of the uniform sigmas
        assert backbone.sigmas(steps) == pytest.approx(np.exp(mu) / (np.exp(mu) + (1 / uniform - 1)), abs=1e-6)
        backbone.pipe(prompt=PROMPTS[:1], height=resolution, width=resolution, num_inference_steps=steps,
                      output_type="latent", max_sequence_length=16)
        assert backbone.sigmas(steps) == pytest.approx(backbone.pipe.scheduler.sigmas[:-1].tolist(), abs=1e-6)


def test_lora_targets_and_quant_skip_names(backbone):
    checks.assert_lora_targets_and_skip_names(backbone)


def test_release_text_encoders(tiny_dir):
    checks.assert_text_encoders_released(checks.load_tiny(MODEL_KIND, tiny_dir), ("text_encoder", "text_encoder_2"))


def test_load_errors(tiny_dir, tmp_path):
    broken = checks.assert_path_errors(MODEL_KIND, tiny_dir, tmp_path, "vae")
    other = shutil.copytree(tiny_dir, tmp_path / "other")
    index = json.loads((other / "model_index.json").read_text())
    (other / "model_index.json").write_text(json.dumps({**index, "_class_name": "StableDiffusion3Pipeline"}))
    with pytest.raises(SolrlError, match="holds a StableDiffusion3Pipeline"):
        checks.load_tiny(MODEL_KIND, other)
    (broken / "vae").mkdir()  # the folder is back, its weights are not
    with pytest.raises(SolrlError, match="cannot load FluxPipeline"):
        checks.load_tiny(MODEL_KIND, broken)
    with pytest.raises(SolrlError, match="multiple of 16"):
        checks.load_tiny(MODEL_KIND, tiny_dir, resolution=72)
