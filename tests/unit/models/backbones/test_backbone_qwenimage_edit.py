"""Qwen-Image-Edit adapter on the tiny random-weight Qwen-Image-Edit directory (its Qwen2.5-VL sees the source
through a processor), checked against QwenImageEditPipeline's own calls with a source image: the conditioning, the
transformer call, the latents after several steps and the decoded image. The pipeline brings a source to ~1 MP
(`calculate_dimensions`); a training run to model.resolution: the pipeline is asked the same here."""

import numpy as np
import pytest
import torch
from diffusers import QwenImageEditPipeline
from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit
from PIL import Image

import backbone_checks as checks
from backbone_checks import PROMPTS, RES
from solrl_core.errors import SolrlError
from solrl_core.models.sampler import sample

MODEL_KIND = TINY_MODEL = "qwenimage-edit"


@pytest.fixture(autouse=True)
def sources_at_the_generated_size(monkeypatch):
    monkeypatch.setattr(pipeline_qwenimage_edit, "calculate_dimensions", lambda area, ratio: (RES, RES, None))


def _sources(seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (RES, RES, 3), dtype=np.uint8)) for _ in PROMPTS]


def _pipeline(backbone, x, sources, steps, output_type, sigmas=None, true_cfg=1.0):
    b, c, h, w = x.shape
    negative = {"negative_prompt": [""] * b} if true_cfg != 1.0 else {}
    return backbone.pipe(
        prompt=PROMPTS, image=sources, height=RES, width=RES, num_inference_steps=steps, sigmas=sigmas,
        true_cfg_scale=true_cfg, latents=QwenImageEditPipeline._pack_latents(x, b, c, h, w), output_type=output_type,
        max_sequence_length=backbone.max_sequence_length, **negative,
    ).images


def test_the_tiny_directory_is_an_edit_pipeline_whose_text_encoder_sees_the_source(tiny_dir, backbone):
    checks.assert_complete_and_small(tiny_dir, {"transformer": "QwenImageTransformer2DModel",
                                                "processor": "Qwen2VLProcessor"})
    assert type(backbone.pipe).__name__ == "QwenImageEditPipeline"
    assert (backbone.edits, backbone.max_sources) == (True, 1)
    cond = backbone.encode_prompts(PROMPTS, [[s] for s in _sources()])
    embeds, mask = backbone.pipe.encode_prompt(prompt=PROMPTS, image=_sources(), device=backbone.device)
    n = embeds.shape[1]
    torch.testing.assert_close(cond["encoder_hidden_states"][:, :n], embeds, atol=0, rtol=0)
    assert not cond["encoder_hidden_states"][:, n:].any() and cond["image_latents"].shape == (2, 16, 1, 8, 8)
    other = backbone.encode_prompts(PROMPTS, [[s] for s in _sources(1)])
    assert not torch.allclose(other["encoder_hidden_states"], cond["encoder_hidden_states"])  # it saw the source
    with pytest.raises(SolrlError, match="one source image per prompt"):
        backbone.encode_prompts(PROMPTS, [_sources(), []])


def test_velocity_with_a_source_matches_the_pipeline_step(backbone):
    x, sources = backbone.initial_noise([5, 6]), _sources()
    cond = backbone.encode_prompts(PROMPTS, [[s] for s in sources])
    packed = _pipeline(backbone, x, sources, 2, "latent", sigmas=[0.8, 0.4])  # 2 steps: shift_terminal needs them
    stepped = QwenImageEditPipeline._unpack_latents(packed, RES, RES, 8)[:, :, 0]
    s0, s1 = (float(s) for s in backbone.pipe.scheduler.sigmas[:2])
    v0 = backbone.velocity(backbone.transformer, x, torch.full((2,), s0), cond)
    x1 = x + (s1 - s0) * v0
    v1 = backbone.velocity(backbone.transformer, x1, torch.full((2,), s1), cond)
    torch.testing.assert_close(x1 - s1 * v1, stepped, atol=1e-5, rtol=1e-5)


def test_latents_after_several_steps_and_the_image_match_the_pipeline(backbone):
    x, sources, steps = backbone.initial_noise([7, 8]), _sources(2), 4
    cond = backbone.encode_prompts(PROMPTS, [[s] for s in sources])
    ours = sample(backbone, backbone.transformer, cond, x, steps, sampler="euler").x0
    reference = QwenImageEditPipeline._unpack_latents(_pipeline(backbone, x, sources, steps, "latent"), RES, RES, 8)
    torch.testing.assert_close(ours, reference[:, :, 0], atol=1e-4, rtol=1e-4)
    checks.assert_decode(backbone, ours, _pipeline(backbone, x, sources, steps, "np"))


def test_guided_sampling_is_the_pipelines_true_cfg_with_the_source_in_both_branches(backbone):
    """CFG 4 (Flow-Factory's Qwen-Image-Edit recipe): the unconditional branch is the empty prompt encoded with each
    row's source, and the guided prediction is rescaled per token as the pipeline's `true_cfg_scale` does."""
    x, sources, steps = backbone.initial_noise([9, 10]), _sources(3), 3
    cond = backbone.encode_prompts(PROMPTS, [[s] for s in sources])
    uncond = backbone.encode_prompts(["", ""], [[s] for s in sources])
    ours = sample(backbone, backbone.transformer, cond, x, steps, sampler="euler", guidance=4.0, uncond=uncond).x0
    reference = _pipeline(backbone, x, sources, steps, "latent", true_cfg=4.0)
    torch.testing.assert_close(ours, QwenImageEditPipeline._unpack_latents(reference, RES, RES, 8)[:, :, 0],
                               atol=1e-4, rtol=1e-4)
    unguided = sample(backbone, backbone.transformer, cond, x, steps, sampler="euler").x0
    assert (ours - unguided).abs().max() > 1e-2


def test_a_prompt_without_a_source_edits_a_grey_image(backbone):
    grey = Image.new("RGB", (RES, RES), (128, 128, 128))
    without, with_grey = backbone.encode_prompts(PROMPTS), backbone.encode_prompts(PROMPTS, [[grey]] * 2)
    for key in without:
        torch.testing.assert_close(without[key], with_grey[key], atol=0, rtol=0)
