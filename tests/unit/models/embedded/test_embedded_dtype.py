"""The embedded backbone honours model.dtype: bf16 weights, fp32 latents in and velocities out, fp32 unchanged."""

from __future__ import annotations

import pytest
import torch

from solrl_core.models.backbones.embedded import EmbeddedBackbone
from solrl_core.config.schema import ModelConfig
from solrl_core.models.sampler import sample

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest: tiny models on a busy 2-core machine

PROMPTS = ["a red circle", "two blue squares", "a green triangle on the left", "three small red circles"]


@pytest.fixture(scope="module")
def backbones():
    return {dtype: EmbeddedBackbone.load(ModelConfig(dtype=dtype)) for dtype in ("float32", "bfloat16")}


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_weights_load_in_model_dtype(backbones):
    fp32, bf16 = backbones["float32"], backbones["bfloat16"]
    assert ModelConfig().dtype == "float32"
    for module in (fp32.transformer, fp32.text_encoder):
        assert {p.dtype for p in module.parameters()} == {torch.float32}
    for name in ("transformer", "text_encoder"):
        full, half = getattr(fp32, name).state_dict(), getattr(bf16, name).state_dict()
        assert full.keys() == half.keys()
        for key, value in full.items():
            expected = value.to(torch.bfloat16) if value.is_floating_point() else value
            assert torch.equal(half[key], expected), key  # the stored weights, rounded once to bf16


def test_fp32_velocity_is_the_plain_transformer_call(backbones):
    backbone = backbones["float32"]
    x_t = backbone.initial_noise([0, 1])
    sigma = torch.tensor([0.3, 0.8])
    cond = backbone.encode_prompts(PROMPTS[:2])
    with torch.no_grad():
        v = backbone.velocity(backbone.transformer, x_t, sigma, cond)
        plain = backbone.transformer(hidden_states=x_t, timestep=sigma * 1000.0, return_dict=False, **cond)[0]
    assert torch.equal(v, plain)


def test_bf16_velocity_takes_and_returns_the_latents_dtype(backbones):
    fp32, bf16 = backbones["float32"], backbones["bfloat16"]
    x_t = fp32.initial_noise(range(4))
    sigma = torch.tensor([0.1, 0.4, 0.7, 1.0])
    cond = bf16.encode_prompts(PROMPTS)
    assert all(c.dtype == torch.bfloat16 for c in cond.values())
    with torch.no_grad():
        v = bf16.velocity(bf16.transformer, x_t, sigma, cond)
        reference = fp32.velocity(fp32.transformer, x_t, sigma, fp32.encode_prompts(PROMPTS))
    assert v.dtype == torch.float32
    assert relative_error(v, reference) < 0.03  # 0.7 % here


def test_sampler_integrates_fp32_latents_over_a_bf16_model(backbones):
    results = {}
    for dtype, backbone in backbones.items():
        noise = backbone.initial_noise(range(4))
        results[dtype] = sample(backbone, backbone.transformer, backbone.encode_prompts(PROMPTS), noise, 6).x0
    assert results["bfloat16"].dtype == torch.float32
    assert relative_error(results["bfloat16"], results["float32"]) < 0.03  # 0.8 % here
    assert backbones["bfloat16"].decode(results["bfloat16"]).shape == (4, 32, 32, 3)

