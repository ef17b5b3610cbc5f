"""Wan 2.1 adapter on the tiny random-weight Wan directory, checked against WanPipeline's own calls: a sample is a
video (latent frames, decoded frames)."""

import shutil

import numpy as np
import pytest
import torch

import backbone_checks as checks
from backbone_checks import PROMPTS, RES
from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.config.schema import ModelConfig
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.models.backbones import registry

MODEL_KIND = TINY_MODEL = "wan"
FRAMES = 5  # the default: 2 latent frames


def _pipeline_step(backbone, x, output_type):
    """WanPipeline, one step from its first sigma to 0 from the latents x; returns (its output, the sigma, the
    transformer's keyword inputs and output as the pipeline called it)."""
    seen = {}

    def record(_module, _args, kwargs, out):
        seen.update(kwargs, out=out[0])

    hook = backbone.transformer.register_forward_hook(record, with_kwargs=True)
    try:
        out = backbone.pipe(prompt=PROMPTS, height=RES, width=RES, num_frames=FRAMES, num_inference_steps=1,
                            guidance_scale=1.0, latents=x, output_type=output_type,
                            max_sequence_length=backbone.max_sequence_length).frames
    finally:
        hook.remove()
    return out, float(backbone.pipe.scheduler.sigmas[0]), seen


def test_tiny_directory_is_complete_small_and_seeded(tiny_dir, tmp_path, backbone):
    checks.assert_complete_and_small(tiny_dir, {
        "transformer": "WanTransformer3DModel", "vae": "AutoencoderKLWan", "text_encoder": "UMT5EncoderModel",
        "tokenizer": "T5Tokenizer", "scheduler": "UniPCMultistepScheduler",
    })
    config = backbone.transformer.config
    assert (config.in_channels, tuple(config.patch_size)) == (16, (1, 2, 2))
    assert config.text_dim == backbone.pipe.text_encoder.config.d_model
    scheduler = backbone.pipe.scheduler.config  # Wan2.1's 480p values
    assert (scheduler.prediction_type, scheduler.use_flow_sigmas, scheduler.flow_shift) == ("flow_prediction", True, 3.0)
    assert (backbone.pipe.vae_scale_factor_temporal, backbone.pipe.vae_scale_factor_spatial) == (4, 8)
    checks.assert_made_again_alike(tiny_dir, TINY_MODEL, tmp_path, backbone)


def test_latents_noise_and_defaults(backbone):
    assert backbone.frames == FRAMES and backbone.latent_shape == (16, 2, RES // 8, RES // 8)
    checks.assert_noise_is_per_seed(backbone)
    d = backbone.defaults
    # Flow-Factory's Wan 2.1 GRPO recipe (examples/grpo/lora/wan21/t2v.yaml): 256 px, 5 frames, max grad norm 1
    assert (d.sampler, d.resolution, d.frames, d.distilled_guidance, d.grad_clip) == ("euler", 256, 5, False, 1.0)
    assert backbone.max_sequence_length == 512


def test_encode_prompts_is_the_pipelines_zero_padded(backbone):
    checks.assert_encoding_deterministic_and_batch_first(backbone, {"encoder_hidden_states": (2, 512, 64)})
    cond = backbone.encode_prompts(PROMPTS)["encoder_hidden_states"]
    tokens = backbone.pipe.tokenizer(PROMPTS[0]).input_ids
    assert cond[0, len(tokens):].abs().max() == 0 and cond[0, len(tokens) - 1].abs().max() > 0


def test_velocity_matches_the_pipeline_step(backbone):
    """The transformer called as WanPipeline calls it. The pipeline's UniPC feeds it an integer timestep (its
    timesteps are int64: 999 for sigma 0.999999); the adapter feeds sigma x 1000 unrounded, the time the flow is at,
    so at the pipeline's own timestep / 1000 the two are the same call."""
    x = backbone.initial_noise([5, 6])
    stepped, sigma, seen = _pipeline_step(backbone, x, "latent")
    cond = backbone.encode_prompts(PROMPTS)
    assert torch.equal(seen["encoder_hidden_states"], cond["encoder_hidden_states"])
    v = backbone.velocity(backbone.transformer, x, seen["timestep"].float() / 1000, cond)
    torch.testing.assert_close(v, seen["out"], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(x - sigma * v, stepped, atol=1e-5, rtol=1e-5)  # a first-order step to 0: x0
    checks.assert_velocity_batch_consistent(backbone)


def test_decode_gives_the_pipelines_frames(backbone):
    x = backbone.initial_noise([7, 8])
    reference, sigma, seen = _pipeline_step(backbone, x, "np")
    cond = backbone.encode_prompts(PROMPTS)
    x0 = x - sigma * backbone.velocity(backbone.transformer, x, seen["timestep"].float() / 1000, cond)
    video = backbone.decode(x0)
    assert video.shape == (2, FRAMES, RES, RES, 3) and video.dtype == np.uint8 and reference.shape == video.shape
    assert np.abs(video.astype(np.int16) - (reference * 255).round().astype(np.int16)).max() <= 1
    backbone.decode_chunk, old = 1, backbone.decode_chunk
    try:
        assert np.abs(backbone.decode(x0).astype(np.int16) - video.astype(np.int16)).max() <= 1
    finally:
        backbone.decode_chunk = old


@pytest.mark.parametrize("steps", [1, 4, 10])
def test_sigmas_are_the_pipeline_schedule(backbone, steps):
    """UniPC's flow sigmas with flow_shift 3 (shift(s) = 3 s / (1 + 2 s) of linspace(1, 1/1000, steps + 1) but the
    last, the first moved 1e-6 below 1): what WanPipeline samples on."""
    backbone.pipe(prompt=PROMPTS[:1], height=RES, width=RES, num_frames=FRAMES, num_inference_steps=steps,
                  output_type="latent", max_sequence_length=16)
    assert backbone.sigmas(steps) == pytest.approx(backbone.pipe.scheduler.sigmas[:-1].tolist(), abs=1e-7)
    s = np.linspace(1, 1 / 1000, steps + 1)[:-1]
    expected = 3 * s / (1 + 2 * s)
    expected[0] -= 1e-6
    assert backbone.sigmas(steps) == pytest.approx(expected.tolist(), abs=1e-6)


def test_frames_set_the_latent_frames(tiny_dir):
    backbone = registry.load_backbone(ModelConfig(kind="wan", path=str(tiny_dir), resolution=RES, frames=9))
    assert backbone.latent_shape == (16, 3, RES // 8, RES // 8)
    assert backbone.decode(backbone.initial_noise([0])).shape == (1, 9, RES, RES, 3)
    single = registry.load_backbone(ModelConfig(kind="wan", path=str(tiny_dir), resolution=RES, frames=1))
    assert single.latent_shape == (16, 1, RES // 8, RES // 8)  # a still: one latent frame


def test_lora_targets_and_quant_skip_names(backbone):
    checks.assert_lora_targets_and_skip_names(backbone)


def test_release_text_encoders(tiny_dir):
    checks.assert_text_encoders_released(checks.load_tiny(MODEL_KIND, tiny_dir), ("text_encoder",))


def test_load_and_config_errors(tiny_dir, tmp_path):
    broken = checks.assert_path_errors(MODEL_KIND, tiny_dir, tmp_path, "vae")
    shutil.rmtree(broken)
    with pytest.raises(SolrlError, match="multiple of 16"):
        checks.load_tiny(MODEL_KIND, tiny_dir, resolution=72)
    with pytest.raises(SolrlError, match=r"model.frames 4 must be 1 \+ a multiple of 4 .* e.g. 1 or 5"):
        registry.load_backbone(ModelConfig(kind="wan", path=str(tiny_dir), frames=4))
    with pytest.raises(ConfigError, match="model.frames 4 must be 1"):
        load_config(TINY, ["model.kind=wan", f"model.path={tiny_dir}", "model.frames=4"])
    with pytest.raises(ConfigError, match="the embedded model makes images; set model.frames: null"):
        load_config(TINY, ["model.frames=5"])


@pytest.fixture(scope="module")
def wan22_dirs(tiny_dir, tmp_path_factory):
    """The tiny Wan in Wan 2.2's two layouts: TI2V-5B's (one transformer; a residual VAE that compresses 16x in space,
    its decoder unpatchifying 2x2; the pipeline's expand_timesteps: one timestep per token) and A14B's (two experts,
    transformer_2 below the boundary)."""
    from diffusers import AutoencoderKLWan, WanPipeline

    from solrl_core.models.backbones.tiny.wan import tiny_transformer

    torch.manual_seed(3)
    vae = AutoencoderKLWan(base_dim=16, decoder_base_dim=16, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                           temperal_downsample=[False, True, True], is_residual=True, patch_size=2, in_channels=12,
                           out_channels=12, scale_factor_spatial=16).eval()
    out = tmp_path_factory.mktemp("wan22")
    WanPipeline.from_pretrained(tiny_dir, vae=vae, expand_timesteps=True).save_pretrained(out / "ti2v")
    WanPipeline.from_pretrained(tiny_dir, transformer_2=tiny_transformer(5),
                                boundary_ratio=0.875).save_pretrained(out / "a14b")
    return out


def test_wan22_ti2v_matches_its_pipeline(wan22_dirs):
    """TI2V-5B's text-to-video: the pipeline feeds one timestep per token, all the step's (no image to condition
    on), which is the adapter's one timestep per sample; its latents are 16x smaller than the frames."""
    backbone = checks.load_tiny(MODEL_KIND, wan22_dirs / "ti2v")
    assert backbone.pipe.config.expand_timesteps and backbone.latent_shape == (16, 2, RES // 16, RES // 16)
    x = backbone.initial_noise([5, 6])
    reference, sigma, seen = _pipeline_step(backbone, x, "np")
    tokens = 2 * (RES // 32) ** 2  # latent frames x (latent side / 2)^2
    assert seen["timestep"].shape == (2, tokens) and (seen["timestep"] == seen["timestep"][0, 0]).all()
    cond = backbone.encode_prompts(PROMPTS)
    v = backbone.velocity(backbone.transformer, x, seen["timestep"][:, 0].float() / 1000, cond)
    torch.testing.assert_close(v, seen["out"], atol=1e-5, rtol=1e-5)
    video = backbone.decode(x - sigma * v)
    assert video.shape == (2, FRAMES, RES, RES, 3)
    assert np.abs(video.astype(np.int16) - (reference * 255).round().astype(np.int16)).max() <= 1
    with pytest.raises(SolrlError, match="must be a multiple of 32"):
        checks.load_tiny(MODEL_KIND, wan22_dirs / "ti2v", resolution=48)


def test_wan22_two_experts_are_model_kind_wan22(wan22_dirs):
    with pytest.raises(SolrlError, match=r"has two experts \(Wan 2.2 A14B: .*set model.kind: wan22"):
        checks.load_tiny(MODEL_KIND, wan22_dirs / "a14b")


def test_explore_decode_of_the_first_frame_is_the_full_decodes_first_frame(backbone):
    """explore.decode.frames: scored with a first-frame reward decodes the first latent frame alone: Wan's VAE is
    causal in time, so its frame is the full decode's first frame, bit for bit; the others hold it. At scale 0.5 the
    frames come back at the full size, close to the full decode."""
    from solrl_core.models.explore_decode import DecodePlan, decode_samples

    latents = backbone.initial_noise([1, 2]) * 0.5
    full = backbone.decode(latents)
    first = decode_samples(backbone, latents, DecodePlan(1.0, latent_frames=1, frames=1, total_frames=FRAMES))
    assert first.shape == full.shape
    np.testing.assert_array_equal(first[:, 0], full[:, 0])
    np.testing.assert_array_equal(first[:, 1:], np.repeat(full[:, :1], FRAMES - 1, axis=1))
    assert not np.array_equal(full[:, 1:], first[:, 1:])
    half = decode_samples(backbone, latents, DecodePlan(0.5))
    assert half.shape == full.shape and half.dtype == np.uint8
