"""FLUX.1 Kontext adapter on the tiny random-weight Kontext directory, checked against FluxKontextPipeline's own
calls with a source image: the transformer call, the latents after several steps, the decoded image."""

import numpy as np
import pytest
import torch
from diffusers import FluxKontextPipeline
from PIL import Image

import backbone_checks as checks
from backbone_checks import PROMPTS, RES
from solrl_core.errors import SolrlError
from solrl_core.models.sampler import sample

MODEL_KIND = TINY_MODEL = "flux1-kontext"


def _sources(seed: int = 0) -> list[Image.Image]:
    """Two different source images, one per prompt, at another size than the generated one (resized by both)."""
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (48, 80, 3), dtype=np.uint8)) for _ in PROMPTS]


def _pipeline(backbone, x, sources, steps, output_type, sigmas=None, guidance=2.5):
    b, c, h, w = x.shape
    return backbone.pipe(
        prompt=PROMPTS, image=[s.resize((RES, RES), Image.LANCZOS) for s in sources], height=RES, width=RES,
        num_inference_steps=steps, sigmas=sigmas, guidance_scale=guidance, _auto_resize=False, max_area=RES * RES,
        latents=FluxKontextPipeline._pack_latents(x, b, c, h, w), output_type=output_type,
        max_sequence_length=backbone.max_sequence_length,
    ).images


def test_the_tiny_directory_is_a_kontext_pipeline_and_the_adapter_edits(tiny_dir, backbone):
    checks.assert_complete_and_small(tiny_dir, {"transformer": "FluxTransformer2DModel", "vae": "AutoencoderKL"})
    assert type(backbone.pipe).__name__ == "FluxKontextPipeline"
    assert (backbone.edits, backbone.max_sources) == (True, 1)
    cond = backbone.encode_prompts(PROMPTS, [[s] for s in _sources()])
    assert cond["image_latents"].shape == (2, *backbone.latent_shape)
    assert set(backbone.encode_prompts(PROMPTS)) == {"encoder_hidden_states", "pooled_projections"}
    with pytest.raises(SolrlError, match="one source image per prompt"):
        backbone.encode_prompts(PROMPTS, [_sources(), []])


def test_velocity_with_a_source_matches_the_pipeline_step(backbone):
    x, sources = backbone.initial_noise([5, 6]), _sources()
    cond = backbone.encode_prompts(PROMPTS, [[s] for s in sources])
    packed = _pipeline(backbone, x, sources, 1, "latent", sigmas=[0.8])
    sigma = float(backbone.pipe.scheduler.sigmas[0])
    v = backbone.velocity(backbone.transformer, x, torch.full((2,), sigma), cond, guidance=2.5)
    torch.testing.assert_close(x - sigma * v, FluxKontextPipeline._unpack_latents(packed, RES, RES, 8),
                               atol=1e-5, rtol=1e-5)
    text_only = backbone.velocity(backbone.transformer, x, torch.full((2,), sigma),
                                  backbone.encode_prompts(PROMPTS), guidance=2.5)
    assert not torch.allclose(v, text_only), "the source changes nothing"
    other = backbone.encode_prompts(PROMPTS, [[s] for s in _sources(1)])
    assert not torch.allclose(v, backbone.velocity(backbone.transformer, x, torch.full((2,), sigma), other, 2.5))


def test_latents_after_several_steps_and_the_image_match_the_pipeline(backbone):
    x, sources, steps = backbone.initial_noise([7, 8]), _sources(2), 4
    cond = backbone.encode_prompts(PROMPTS, [[s] for s in sources])
    ours = sample(backbone, backbone.transformer, cond, x, steps, sampler="euler", guidance=2.5).x0
    reference = _pipeline(backbone, x, sources, steps, "latent")
    torch.testing.assert_close(ours, FluxKontextPipeline._unpack_latents(reference, RES, RES, 8),
                               atol=1e-4, rtol=1e-4)
    checks.assert_decode(backbone, ours, _pipeline(backbone, x, sources, steps, "np"))
