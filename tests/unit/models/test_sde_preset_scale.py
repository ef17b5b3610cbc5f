"""Every shipped preset whose objective samples SDE rollouts (the Flow-GRPO presets), sampled on the tiny model of its
backbone with the preset's own schedule, window and noise level, ends at the scale of the ODE's samples: no SDE step
divides by about 0. An editing model's presets sample edits, each prompt with its source image. Before the stand-in
covered a first sigma just below 1, Wan's (0.999999) gave a first step of scale a·1000 and final latents ~2,800 times
the ODE's; the window-from-step-0 case below keeps that in view."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from repo_paths import ROOT
from solrl_core.config.checks import rollout_noise_level
from solrl_core.config.loading import load_config
from solrl_core.models.backbones import registry
from solrl_core.models.backbones.tiny import make_tiny_model, tiny_models
from solrl_core.models.sampler import sample
from solrl_core.models.sde_sampler import sample_sde
from solrl_core.rl.objectives import objective_for

PRESETS = ROOT / "configs" / "presets"
SEEDS = [3, 4]
CPU = ["model.device=cpu", "model.dtype=float32", "model.resolution=64", "model.frames=null"]


def sde_presets() -> dict[str, Path]:
    """Model key -> one SDE preset of it (every family of a model samples the same schedule: explore at the
    regenerate's steps)."""
    from solrl_core.config.presets import preset_models

    found: dict[str, Path] = {}
    for name, model in preset_models().items():
        path = PRESETS / f"{name}.yaml"
        if model not in found and rollout_noise_level(load_config(path)) > 0:
            found[model] = path
    return found


def tiny_maker_for(model: str) -> str:
    """The `make-tiny` name of `model`, or of a model of the same kind (wan14b: the tiny wan is its architecture)."""
    specs = {s.key: s for s in registry.backbone_specs()}
    makers = tiny_models()
    return model if model in makers else next(k for k, s in makers.items() if s.kind == specs[model].kind)


PRESET_MODELS = sde_presets()


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory, one_torch_thread):
    made: dict[str, Path] = {}

    def get(model: str) -> Path:
        name = tiny_maker_for(model)
        if name not in made:
            made[name] = make_tiny_model(name, tmp_path_factory.mktemp(name) / "tiny")
        return made[name]

    return get


def _std(x: torch.Tensor) -> float:
    return float(x.float().std())


def test_every_model_with_presets_has_sde_presets():
    specs = registry.backbone_specs()
    assert set(PRESET_MODELS) == {s.key for s in specs if s.part.is_file()}
    assert {s.key for s in specs if s.edits and s.part.is_file()} >= {"flux1-kontext", "qwenimage-edit"}  # edits too


@pytest.mark.parametrize("model", sorted(PRESET_MODELS))
def test_an_sde_preset_samples_at_the_scale_of_the_ode(model, tiny_dirs):
    cfg = load_config(PRESET_MODELS[model], [f"model.path={tiny_dirs(model)}", *CPU])
    assert cfg.explore.steps == cfg.regenerate.steps  # the explore samples the regenerate's schedule
    backbone = registry.load_backbone(cfg.model)
    objective = objective_for(cfg)
    steps, level = cfg.regenerate.steps, objective.sampling_noise_level()
    # an editing model's presets sample edits: each prompt with a source image (the tiny model's size)
    sources = ([[Image.new("RGB", (64, 64), (200, 40, 40))]] * len(SEEDS) if registry.backbone_spec(model).edits
               else None)
    cond = (backbone.encode_prompts(["make it blue"] * len(SEEDS), sources) if sources
            else backbone.encode_prompts(["a red circle"] * len(SEEDS)))
    ode = sample(backbone, backbone.transformer, cond, backbone.initial_noise(SEEDS), steps,
                 sampler=cfg.model.sampler or backbone.defaults.sampler).x0
    starts = cfg.objective.flow_grpo.window_start
    windows = {objective.sde_window(steps, torch.Generator().manual_seed(k)) for k in range(16)}
    assert windows >= {objective.sde_window(steps)} and all(w[0] in (starts if isinstance(starts, list)
                                                                        else [starts]) for w in windows)
    # the preset's windows, and the whole schedule from step 0 (where a first sigma just below 1 sat)
    for window in sorted(windows | {(0, steps)}):
        sde = sample_sde(backbone, backbone.transformer, cond, SEEDS, steps, level, window).x0
        assert torch.isfinite(sde).all()
        ratio = _std(sde) / _std(ode)
        assert 0.5 < ratio < 2.0, (model, window, ratio)
