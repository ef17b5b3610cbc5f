"""explore.sibling: exploring with another model of the same kind (a smaller or step-distilled sibling) sharing the
trained model's latent space and text encoders; θ_old's update added to its weights (delta) or not (frozen); its own
schedule; refused with one line where it cannot stand in."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
import zarr

from repo_paths import TINY
from siblings import write_perturbed_sibling, write_shallow_sibling
from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.models.backbones.cache import load_backbone, load_sibling
from solrl_core.models.backbones.embedded import PRETRAINED_DIR
from solrl_core.models.embedded.model import build_model
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run_config import prepare_run
from solrl_core.stages.checkpoints import attach_policy, load_adapters, previous_checkpoint
from solrl_core.stages.context import StageContext
from solrl_core.stages.quantize import explore_copy
from solrl_core.stages.runner import run_stage

pytestmark = pytest.mark.slow  # whole iterations or models: `make test` runs it, `make test-fast` not

FULL = ["explore.precision=fp32"]  # the copy's weights are then the merged ones themselves


@pytest.fixture(scope="module")
def siblings(tmp_path_factory):
    """name -> an embedded model directory: `perturbed` (the shipped weights moved by seeded noise), `shallow` (one
    transformer block: a smaller sibling), `small` (16x16 images)."""
    root = tmp_path_factory.mktemp("siblings")
    write_perturbed_sibling(root / "perturbed")
    write_shallow_sibling(root / "shallow")
    build_model(16).save(root / "small")
    return {name: str(root / name) for name in ("perturbed", "shallow", "small")}


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, one_torch_thread):
    """Iteration 0 done without a sibling: θ_old of iteration 1 is trained away from its init."""
    run = RunDir(tmp_path_factory.mktemp("sibling") / "run")
    cfg = prepare_run(run, load_config(TINY, FULL))
    for stage in STAGES:
        run_stage(run, cfg, 0, stage, progress=False)
    return run, cfg


def _ctx(run, *overrides):
    return StageContext(run, load_config(TINY, [*FULL, *overrides]), 1, progress=False)


def _velocity(ctx, transformer, backbone):
    x = backbone.initial_noise([3, 4])
    with torch.no_grad():
        return backbone.velocity(transformer, x, torch.full((2,), 0.7), ctx.encode(["a red cube", "a cat"]))


def test_a_sibling_with_the_models_own_weights_explores_exactly_as_the_model(trained_run):
    run, _ = trained_run
    plain, same = _ctx(run), _ctx(run, f"explore.sibling.path={PRETRAINED_DIR}")
    backbone = load_backbone(plain.cfg)
    # merged; merged then quantized; quantized with θ_old's LoRA beside it
    for setting in (["explore.precision=fp32"], ["explore.precision=nvfp4_emulated"],
                    ["explore.precision=nvfp4_emulated", "quant.lora_branch=true"]):
        a = _ctx(run, *setting)
        b = _ctx(run, *setting, f"explore.sibling.path={PRETRAINED_DIR}")
        assert torch.equal(_velocity(a, explore_copy(a, backbone)[0], backbone),
                           _velocity(b, explore_copy(b, backbone)[0], backbone))
    assert explore_copy(same, backbone)[1]["sibling"] == str(PRETRAINED_DIR)
    assert explore_copy(plain, backbone)[1]["sibling"] is None


def test_the_sibling_carries_theta_olds_update_or_stays_frozen(trained_run, siblings):
    run, cfg = trained_run
    backbone = load_backbone(cfg)
    policy = attach_policy(cfg, backbone)
    load_adapters(policy, previous_checkpoint(StageContext(run, cfg, 1)))
    factors = policy.lora_factors("old")
    assert any(b.abs().max() > 0 for _, b, _ in factors.values())  # θ_old moved in iteration 0
    sibling = load_sibling(cfg, siblings["perturbed"]).transformer
    delta = explore_copy(_ctx(run, f"explore.sibling.path={siblings['perturbed']}"), backbone)[0]
    frozen = explore_copy(_ctx(run, f"explore.sibling.path={siblings['perturbed']}",
                               "explore.sibling.policy=frozen"), backbone)[0]
    own = dict(sibling.named_parameters())
    moved = 0
    for name, value in delta.named_parameters():
        layer = name.removesuffix(".weight")
        if layer in factors:
            a, b, scaling = factors[layer]
            torch.testing.assert_close(value, own[name] + scaling * b @ a, rtol=0, atol=1e-6)
            moved += not torch.equal(value, own[name])
        else:
            assert torch.equal(value, own[name])
    assert moved > len(factors) // 2  # (the last block's context projections get no gradient)
    assert all(torch.equal(value, own[name]) for name, value in frozen.named_parameters())


def test_an_iteration_explores_with_the_sibling_and_trains_the_model(trained_run, siblings, tmp_path):
    run, _ = trained_run
    other = RunDir(tmp_path / "run")
    shutil.copytree(run.root, other.root)
    cfg = load_config(TINY, [*FULL, f"explore.sibling.path={siblings['perturbed']}"])
    for stage in STAGES:
        run_stage(other, cfg, 1, stage, progress=False)
    assert json.loads((other.stage_dir(1, "quantize") / "report.json").read_text())["sibling"] == siblings["perturbed"]
    pool = zarr.open_group(str(other.stage_dir(1, "explore") / "pool.zarr"), mode="r")
    assert pool.attrs["sibling"] == siblings["perturbed"]
    assert other.is_complete(1, "update")


def test_a_smaller_sibling_explores_frozen_and_is_refused_the_update(trained_run, siblings):
    run, cfg = trained_run
    backbone = load_backbone(cfg)
    with pytest.raises(SolrlError, match=r"has no such layer.*explore.sibling.policy: frozen"):
        explore_copy(_ctx(run, f"explore.sibling.path={siblings['shallow']}"), backbone)
    ctx = _ctx(run, f"explore.sibling.path={siblings['shallow']}", "explore.sibling.policy=frozen")
    copy = explore_copy(ctx, backbone)[0]
    assert len(copy.transformer_blocks) == 1
    assert _velocity(ctx, copy, backbone).shape == (2, 3, 32, 32)


def test_a_sibling_of_other_images_or_files_is_refused_in_one_line(trained_run, siblings, tmp_path):
    from solrl_core.run_preflight import preflight

    run, cfg = trained_run
    with pytest.raises(SolrlError, match="its images are 16x16, the trained model's 32x32"):
        explore_copy(_ctx(run, f"explore.sibling.path={siblings['small']}"), load_backbone(cfg))
    with pytest.raises(SolrlError, match=f"missing {tmp_path}/none/solrl_embedded.json.*explore.sibling.path"):
        preflight(load_config(TINY, [f"explore.sibling.path={tmp_path / 'none'}"]))
    with pytest.raises(ConfigError, match="explore.sibling.path is set, but naive_quant trains on the explore"):
        load_config(TINY, ["family=naive_quant", "regenerate.enabled=false", f"explore.sibling.path={tmp_path}"])
    # at full precision a sibling may sample as many steps as the regenerate: it is another, cheaper model
    assert load_config(TINY, [*FULL, "explore.steps=4", f"explore.sibling.path={tmp_path}"]).explore.steps == 4


def test_a_guardrail_escalation_returns_to_the_trained_model(tmp_path, siblings):
    from solrl_core.stages.explore_setting import explore_setting

    cfg = load_config(TINY, [f"explore.sibling.path={siblings['perturbed']}", "explore.guardrail.enabled=true",
                             "explore.guardrail.patience=1"])
    run = RunDir(tmp_path / "run")
    assert explore_setting(StageContext(run, cfg, 0)).sibling == siblings["perturbed"]
    run.complete(0, "score_final", {"fidelity_spearman": 0.1})
    escalated = explore_setting(StageContext(run, cfg, 1))
    assert escalated.sibling is None and len(escalated.escalations) == 1


def test_a_flux_sibling_samples_on_its_own_schedule(tmp_path):
    """A step-distilled FLUX.1 (schnell) samples unshifted: its scheduler config has no dynamic shift and shift 1."""
    from solrl_core.tiny_bundle import make_tiny_bundle

    tiny = make_tiny_bundle("flux1", tmp_path / "dev")["dir"]
    schnell = tmp_path / "schnell"
    shutil.copytree(tiny, schnell)
    config_file = schnell / "scheduler" / "scheduler_config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "use_dynamic_shifting": False, "shift": 1.0}))
    from solrl_core.config.schema import ModelConfig
    from solrl_core.models.backbones.registry import load_backbone as load_model_backbone

    backbone = load_model_backbone(ModelConfig(kind="flux1", path=str(tiny)))
    view = backbone.sibling(str(schnell))
    np.testing.assert_allclose(view.sigmas(4), np.linspace(1.0, 0.25, 4), rtol=0, atol=1e-6)
    assert not np.allclose(backbone.sigmas(4), view.sigmas(4))  # the trained model's own shift is kept
    assert view.text_encoder_names == backbone.text_encoder_names and view.pipe is backbone.pipe
    assert all(torch.equal(a, b) for a, b in zip(view.transformer.parameters(), backbone.transformer.parameters()))
    assert view.transformer is not backbone.transformer
