"""Qwen-Image adapter on the tiny random-weight Qwen-Image directory, checked against QwenImagePipeline's own calls."""


import numpy as np
import pytest
import torch
from diffusers import QwenImagePipeline

import backbone_checks as checks
from backbone_checks import PROMPTS, RES
from solrl_core.errors import SolrlError

MODEL_KIND = TINY_MODEL = "qwenimage"


def _pipeline(backbone, x, steps, output_type, sigmas=None):
    """QwenImagePipeline from the plain latents x (packed as the pipeline packs them), no true CFG."""
    b, c, h, w = x.shape
    return backbone.pipe(
        prompt=PROMPTS, height=RES, width=RES, num_inference_steps=steps, sigmas=sigmas, true_cfg_scale=1.0,
        latents=QwenImagePipeline._pack_latents(x, b, c, h, w), output_type=output_type,
        max_sequence_length=backbone.max_sequence_length,
    ).images


def test_tiny_directory_is_complete_small_and_seeded(tiny_dir, tmp_path, backbone):
    checks.assert_complete_and_small(tiny_dir, {
        "transformer": "QwenImageTransformer2DModel", "vae": "AutoencoderKLQwenImage",
        "text_encoder": "Qwen2_5_VLForConditionalGeneration", "tokenizer": "Qwen2Tokenizer",
        "scheduler": "FlowMatchEulerDiscreteScheduler",
    }, max_mb=5.0)
    pipe = backbone.pipe
    prefix = pipe.prompt_template_encode.split("{}")[0]
    # the pipeline drops the template's first 34 tokens: the tiny tokenizer splits the system prefix alike
    assert len(pipe.tokenizer(prefix).input_ids) == pipe.prompt_template_encode_start_idx == 34
    config = backbone.transformer.config
    assert (config.in_channels, config.out_channels, config.guidance_embeds) == (64, 16, False)
    assert sum(config.axes_dims_rope) == config.attention_head_dim
    assert config.joint_attention_dim == pipe.text_encoder.config.text_config.hidden_size
    scheduler = pipe.scheduler.config  # Qwen-Image's values
    assert (scheduler.use_dynamic_shifting, scheduler.base_shift, scheduler.max_shift) == (True, 0.5, 0.9)
    assert (scheduler.base_image_seq_len, scheduler.max_image_seq_len, scheduler.shift_terminal) == (256, 8192, 0.02)
    assert backbone.vae.config.latents_mean[0] == -0.7571 and backbone.vae.config.latents_std[0] == 2.8184
    checks.assert_made_again_alike(tiny_dir, TINY_MODEL, tmp_path, backbone)


def test_latents_noise_and_defaults(backbone):
    assert backbone.pipe.vae_scale_factor == 8
    assert backbone.latent_shape == (16, RES // 8, RES // 8)
    assert backbone.image_seq_len == (RES // 16) ** 2
    checks.assert_noise_is_per_seed(backbone)
    d = backbone.defaults
    assert (d.sampler, d.resolution, d.distilled_guidance, backbone.max_sequence_length) == ("euler", 512, False, 256)


def test_encode_prompts_is_the_pipelines_padded(backbone):
    checks.assert_encoding_deterministic_and_batch_first(
        backbone, {"encoder_hidden_states": (2, 256, 32), "encoder_hidden_states_mask": (2, 256)}
    )
    cond = backbone.encode_prompts(PROMPTS)
    embeds, mask = backbone.pipe.encode_prompt(PROMPTS, device="cpu", max_sequence_length=256)
    n = embeds.shape[1]
    assert mask is not None and mask[0].sum() < mask[1].sum() == n  # two prompts of different lengths
    torch.testing.assert_close(cond["encoder_hidden_states"][:, :n], embeds)
    assert torch.equal(cond["encoder_hidden_states_mask"][:, :n], mask)
    assert not cond["encoder_hidden_states"][:, n:].any() and not cond["encoder_hidden_states_mask"][:, n:].any()


def _one_step(backbone, x, output_type):
    """One pipeline Euler step from sigma 0.8 (dynamically shifted) to 0, and that sigma. The release's
    shift_terminal would stretch a one-step schedule down to 0.02, so this step runs without it."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    scheduler = backbone.pipe.scheduler
    backbone.pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(scheduler.config, shift_terminal=None)
    try:
        out = _pipeline(backbone, x, 1, output_type, sigmas=[0.8])
        return out, float(backbone.pipe.scheduler.sigmas[0])
    finally:
        backbone.pipe.scheduler = scheduler


def test_velocity_matches_the_pipeline_step(backbone):
    x = backbone.initial_noise([5, 6])
    cond = backbone.encode_prompts(PROMPTS)
    packed, sigma = _one_step(backbone, x, "latent")
    assert 0.8 < sigma < 1.0  # the dynamic shift raises it
    stepped = QwenImagePipeline._unpack_latents(packed, RES, RES, 8)[:, :, 0]  # x + (0 - sigma) * v
    v = backbone.velocity(backbone.transformer, x, torch.full((2,), sigma), cond)
    torch.testing.assert_close(x - sigma * v, stepped, atol=1e-5, rtol=1e-5)
    checks.assert_velocity_batch_consistent(backbone)


def test_decode_matches_the_pipeline(backbone):
    x = backbone.initial_noise([7, 8])
    reference, sigma = _one_step(backbone, x, "np")
    cond = backbone.encode_prompts(PROMPTS)
    x0 = x - sigma * backbone.velocity(backbone.transformer, x, torch.full((2,), sigma), cond)
    checks.assert_decode(backbone, x0, reference)


def test_euler_sampling_equals_the_pipeline(backbone):
    """Several Euler steps on the adapter's sigmas and velocity give the pipeline's image for the same latents."""
    steps = 4
    x = backbone.initial_noise([9, 10])
    cond = backbone.encode_prompts(PROMPTS)
    sigmas = [*backbone.sigmas(steps), 0.0]
    z = x
    for s, s_next in zip(sigmas[:-1], sigmas[1:]):
        z = z + (s_next - s) * backbone.velocity(backbone.transformer, z, torch.full((2,), s), cond)
    reference = _pipeline(backbone, x, steps, "np")
    checks.assert_decode(backbone, z, reference)


@pytest.mark.parametrize("resolution", [RES, 512])
def test_sigmas_are_the_pipeline_schedule(tiny_dir, resolution):
    backbone = checks.load_tiny(MODEL_KIND, tiny_dir, resolution)
    config = backbone.pipe.scheduler.config
    mu = 0.5 + (backbone.image_seq_len - 256) * (0.9 - 0.5) / (8192 - 256)  # Qwen-Image's scheduler values
    with pytest.raises(SolrlError, match="at least 2 steps"):
        backbone.sigmas(1)  # the pipeline's one-step schedule is NaN (0 / 0 in the terminal stretch)
    for steps in (2, 6, 10):
        uniform = np.linspace(1.0, 1.0 / steps, steps)
        shifted = np.exp(mu) / (np.exp(mu) + (1 / uniform - 1))
        # shift_terminal 0.02: 1 - sigma is scaled so that the last sigma becomes 0.02
        one_minus = 1 - shifted
        stretched = 1 - one_minus / (one_minus[-1] / (1 - config.shift_terminal))
        assert backbone.sigmas(steps) == pytest.approx(stretched, abs=1e-6)
        backbone.pipe(prompt=PROMPTS[:1], height=resolution, width=resolution, num_inference_steps=steps,
                      output_type="latent", max_sequence_length=16)
        assert backbone.sigmas(steps) == pytest.approx(backbone.pipe.scheduler.sigmas[:-1].tolist(), abs=1e-6)


def test_lora_targets_and_quant_skip_names(backbone):
    checks.assert_lora_targets_and_skip_names(backbone)


def test_release_text_encoders(tiny_dir):
    checks.assert_text_encoders_released(checks.load_tiny(MODEL_KIND, tiny_dir), ("text_encoder",))


def test_resolution_must_fit_the_packing(tiny_dir):
    with pytest.raises(SolrlError, match="multiple of 16"):
        checks.load_tiny(MODEL_KIND, tiny_dir, resolution=72)


def test_load_errors(tiny_dir, tmp_path):
    checks.assert_path_errors(MODEL_KIND, tiny_dir, tmp_path, "vae")


def test_a_dropped_transformer_copy_frees_its_rotary_module(backbone):
    """diffusers memoizes Qwen-Image's rotary tables in class-level caches keyed by the module, so a plain copy of
    the transformer, once used and dropped, stays alive with its tables (the run makes a copy per iteration: the
    explore copy, the evaluation's policy). The run's copies have caches of their own, freed with them, and give the
    same velocity as the base model."""
    import copy
    import gc
    import weakref

    from solrl_core.stages.transformer_copies import fresh_transformer, weight_sharing_transformer

    x = backbone.initial_noise([0])
    sigma = torch.full((1,), 0.7)
    cond = backbone.encode_prompts(PROMPTS[:1])
    expected = backbone.velocity(backbone.transformer, x, sigma, cond)

    def used_then_dropped(model) -> weakref.ref:
        torch.testing.assert_close(backbone.velocity(model, x, sigma, cond), expected, rtol=0, atol=0)
        torch.testing.assert_close(backbone.velocity(model, x, sigma, cond), expected, rtol=0, atol=0)  # cached
        return weakref.ref(model.pos_embed)

    plain = used_then_dropped(copy.deepcopy(backbone.transformer))
    gc.collect()
    assert plain() is not None  # the cause: diffusers' class-level cache holds it
    for make in (fresh_transformer, weight_sharing_transformer):
        rotary = used_then_dropped(make(backbone))
        gc.collect()
        assert rotary() is None, make.__name__
