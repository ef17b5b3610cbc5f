"""SD3.5 adapter (Large and Medium) on the tiny random-weight directories, checked against StableDiffusion3Pipeline's
own calls."""

import json

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

import backbone_checks as checks
from backbone_checks import PROMPTS, RES
from solrl_core.config.schema import ModelConfig
from solrl_core.errors import SolrlError
from solrl_core.models.backbones import registry
from solrl_core.models.model_configs import PACKAGE_CONFIG_DIR
from solrl_core.models.sampler import sample, schedule_sigmas

# stabilityai/stable-diffusion-3.5-large, scheduler/scheduler_config.json: a FlowMatchEulerDiscreteScheduler with 1000
# training timesteps and a static shift of 3.0 (no dynamic shifting; every other setting at diffusers' default).
SD35_SCHEDULER = dict(num_train_timesteps=1000, shift=3.0)
REAL_CONFIGS = PACKAGE_CONFIG_DIR
MODEL_KIND = "sd35"


@pytest.fixture(scope="module", params=["sd35l", "sd35m"])
def tiny_name(request) -> str:
    """Both SD3.5 variants (the backbones conftest makes and loads each)."""
    return request.param


def _one_pipeline_step(backbone, x, sigma, output_type):
    """StableDiffusion3Pipeline without CFG, one Euler step from sigma (shifted by its scheduler) to 0."""
    out = backbone.pipe(
        prompt=PROMPTS, height=RES, width=RES, num_inference_steps=1, sigmas=[sigma], guidance_scale=1.0,
        latents=x.clone(), output_type=output_type, max_sequence_length=backbone.max_sequence_length,
    ).images
    return out, float(backbone.pipe.scheduler.sigmas[0])


def test_tiny_directory_is_complete_small_and_seeded(tiny_name, tiny_dir, tmp_path, backbone):
    name = tiny_name
    checks.assert_complete_and_small(tiny_dir, {
        "transformer": "SD3Transformer2DModel", "vae": "AutoencoderKL", "text_encoder": "CLIPTextModelWithProjection",
        "tokenizer": "CLIPTokenizer", "text_encoder_2": "CLIPTextModelWithProjection", "tokenizer_2": "CLIPTokenizer",
        "text_encoder_3": "T5EncoderModel", "scheduler": "FlowMatchEulerDiscreteScheduler",
    })
    pipe, config = backbone.pipe, backbone.transformer.config
    real = json.loads((REAL_CONFIGS / f"sd35-{'large' if name == 'sd35l' else 'medium'}.transformer.json").read_text())
    for key in ("patch_size", "in_channels", "out_channels", "qk_norm"):
        assert config[key] == real[key], key
    # MMDiT-X (SD3.5-M): dual attention in the first half of the layers, as in the real config
    assert bool(config.dual_attention_layers) == bool(real["dual_attention_layers"])
    dual = [i for i, block in enumerate(backbone.transformer.transformer_blocks) if block.attn2 is not None]
    assert dual == list(config.dual_attention_layers) == ([0] if name == "sd35m" else [])
    clip_widths = pipe.text_encoder.config.hidden_size + pipe.text_encoder_2.config.hidden_size
    assert config.joint_attention_dim == pipe.text_encoder_3.config.d_model > clip_widths  # CLIP states get padded
    pooled = pipe.text_encoder.config.projection_dim + pipe.text_encoder_2.config.projection_dim
    assert config.pooled_projection_dim == pooled
    assert pipe.tokenizer_2.pad_token == "!"  # as SD3's CLIP-G tokenizer
    assert dict(pipe.scheduler.config)["shift"] == 3.0 and not pipe.scheduler.config.use_dynamic_shifting
    assert (backbone.vae.config.scaling_factor, backbone.vae.config.shift_factor) == (1.5305, 0.0609)
    checks.assert_made_again_alike(tiny_dir, name, tmp_path, backbone)


def test_latents_noise_and_defaults(backbone):
    assert backbone.pipe.vae_scale_factor == 2 ** (len(backbone.vae.config.block_out_channels) - 1) == 8
    assert backbone.latent_shape == (16, RES // 8, RES // 8)
    checks.assert_noise_is_per_seed(backbone)
    d = backbone.defaults
    assert (d.sampler, d.resolution, d.distilled_guidance, d.quant_min_width) == ("dpmpp_2m", 1024, False, 2432)
    # the reference (NVlabs/Sana): T5 length TEXT_ENCODER_MAX_SEQ_LEN of train_scripts/sol_rl/train_sd3.py; the clip
    # configs/sol_rl/base.py's train.max_grad_norm, which configs/sol_rl/sd3.py does not override
    assert (backbone.max_sequence_length, d.grad_clip) == (128, 0.002)


def test_encode_prompts(backbone):
    # 77 CLIP tokens + 128 T5 tokens, T5 width; pooled CLIP-L + CLIP-G
    checks.assert_encoding_deterministic_and_batch_first(
        backbone, {"encoder_hidden_states": (2, 77 + 128, 96), "pooled_projections": (2, 80)}
    )


def test_velocity_matches_the_pipeline_step(backbone):
    x = backbone.initial_noise([5, 6])
    packed, sigma = _one_pipeline_step(backbone, x, 0.6, "latent")
    assert sigma == pytest.approx(3 * 0.6 / (1 + 2 * 0.6))  # shift 3
    cond = backbone.encode_prompts(PROMPTS)
    v = backbone.velocity(backbone.transformer, x, torch.full((2,), sigma), cond)
    torch.testing.assert_close(x - sigma * v, packed, atol=1e-5, rtol=1e-5)  # x + (0 - sigma) * v
    checks.assert_velocity_batch_consistent(backbone)


def test_decode_matches_the_pipeline(backbone):
    x = backbone.initial_noise([7, 8])
    reference, sigma = _one_pipeline_step(backbone, x, 0.6, "np")
    cond = backbone.encode_prompts(PROMPTS)
    x0 = x - sigma * backbone.velocity(backbone.transformer, x, torch.full((2,), sigma), cond)
    checks.assert_decode(backbone, x0, reference)


@pytest.mark.parametrize("steps", [6, 10, 40])
def test_sigmas_are_the_schedulers_default_schedule(backbone, steps):
    """The reference samples SD3.5 on its scheduler's own default timesteps (`set_timesteps(steps)`, no sigmas given:
    NVlabs/Sana `pipeline_with_logprob_sd3`), as StableDiffusion3Pipeline does; explore, regenerate, the update's
    times (the pool's sigmas) and evaluation all run on `schedule_sigmas`."""
    assert {k: backbone.pipe.scheduler.config[k] for k in SD35_SCHEDULER} == SD35_SCHEDULER  # the tiny copies SD3.5's
    reference = FlowMatchEulerDiscreteScheduler(**SD35_SCHEDULER)
    reference.set_timesteps(steps)
    expected = reference.sigmas.tolist()  # terminal 0 included
    assert backbone.sigmas(steps) == pytest.approx(expected[:-1], abs=1e-7)
    assert schedule_sigmas(backbone, steps) == pytest.approx(expected, abs=1e-7)
    # it ends at the shift applied twice to sigma 1/1000 (the scheduler's smallest sigma is already shifted): ~0.0089
    shift = lambda sigma: 3 * sigma / (1 + 2 * sigma)  # noqa: E731
    assert backbone.sigmas(steps)[-1] == pytest.approx(shift(shift(1 / 1000)), abs=1e-7)
    backbone.pipe(prompt=PROMPTS[:1], height=RES, width=RES, num_inference_steps=steps, guidance_scale=1.0,
                  output_type="latent", max_sequence_length=16)
    assert backbone.sigmas(steps) == pytest.approx(backbone.pipe.scheduler.sigmas[:-1].tolist(), abs=1e-7)


def test_the_sampler_runs_on_the_schedule(backbone):
    cond = backbone.encode_prompts(PROMPTS)
    reference = FlowMatchEulerDiscreteScheduler(**SD35_SCHEDULER)
    reference.set_timesteps(3)
    result = sample(backbone, backbone.transformer, cond, backbone.initial_noise([1, 2]), 3, sampler="dpmpp_2m")
    assert result.sigmas == pytest.approx(reference.sigmas.tolist(), abs=1e-7)


def test_lora_targets_and_quant_skip_names(backbone):
    checks.assert_lora_targets_and_skip_names(backbone)


def test_release_text_encoders(tiny_dir):
    checks.assert_text_encoders_released(checks.load_tiny(MODEL_KIND, tiny_dir),
                                         ("text_encoder", "text_encoder_2", "text_encoder_3"))


def test_load_errors(tiny_dir, tmp_path):
    checks.assert_path_errors(MODEL_KIND, tiny_dir, tmp_path, "text_encoder_3")
    with pytest.raises(SolrlError, match="holds a StableDiffusion3Pipeline, but model.kind 'flux1'"):
        registry.load_backbone(ModelConfig(kind="flux1", path=str(tiny_dir)))
    with pytest.raises(SolrlError, match="multiple of 16"):
        checks.load_tiny(MODEL_KIND, tiny_dir, resolution=1000)
    with pytest.raises(SolrlError, match="too large"):
        checks.load_tiny(MODEL_KIND, tiny_dir, resolution=2048)  # the tiny pos_embed_max_size 64 covers up to 1024 px
