"""Step-selective precision (solrl_core/models/step_precision.py): both samplers run the named first and last steps on
the full-precision model and the others on the low-precision copy, and a run of two copies of one model samples
exactly as that model."""

from __future__ import annotations

import pytest
import torch

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.models.backbones.cache import load_backbone
from solrl_core.models.sampler import sample
from solrl_core.models.sde_sampler import sample_sde
from solrl_core.models.step_precision import StepSelective, model_at, models_of
from solrl_core.stages.transformer_copies import weight_sharing_transformer


@pytest.fixture(scope="module")
def backbone(one_torch_thread):
    return load_backbone(load_config(TINY))


def _recorded(backbone, calls: list[str]) -> StepSelective:
    low, full = weight_sharing_transformer(backbone), weight_sharing_transformer(backbone)
    low.register_forward_hook(lambda *_: calls.append("low"))
    full.register_forward_hook(lambda *_: calls.append("full"))
    return StepSelective(low, full, 2, 1)


@pytest.mark.parametrize("sampler", ["ode", "sde"])
def test_the_first_and_last_steps_run_on_the_full_model(backbone, sampler):
    calls: list[str] = []
    model = _recorded(backbone, calls)
    cond = backbone.encode_prompts(["a red circle", "two blue squares"])
    seeds = [5, 6]
    if sampler == "ode":
        run = sample(backbone, model, cond, backbone.initial_noise(seeds), 6).x0
        plain = sample(backbone, backbone.transformer, cond, backbone.initial_noise(seeds), 6).x0
    else:
        run = sample_sde(backbone, model, cond, seeds, 6, noise_level=0.7).x0
        plain = sample_sde(backbone, backbone.transformer, cond, seeds, 6, noise_level=0.7).x0
    assert calls == ["full", "full", "low", "low", "low", "full"]
    assert torch.equal(run, plain)  # two copies of W0: the sample of W0 itself


def test_which_model_a_step_runs_on():
    low, full = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    model = StepSelective(low, full, 1, 2)
    assert [model_at(model, i, 5) is full for i in range(5)] == [True, False, False, True, True]
    assert model.full_steps(5) == 3 and model.full_steps(2) == 2
    assert model_at(low, 0, 5) is low and models_of(low) == (low,) and models_of(model) == (low, full)
    with pytest.raises(ValueError, match=">= 0"):
        StepSelective(low, full, -1, 0)
