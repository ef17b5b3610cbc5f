"""quant.lora_branch: W0 quantized once per run, θ_old's LoRA in high precision beside the 4-bit base."""

from __future__ import annotations

import json

import pytest
import torch

from solrl_core.config.loading import load_config
from solrl_core.models.quant.linear import NVFP4EmulatedLinear
from solrl_core.models.quant.lora_branch import LoraBranch
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run_config import prepare_run
from solrl_core.models.backbones.cache import load_backbone
from solrl_core.stages.checkpoints import attach_policy, load_adapters, previous_checkpoint
from solrl_core.stages.context import StageContext
from solrl_core.stages.transformer_copies import fresh_transformer
from solrl_core.stages.quantize import base_key, explore_copy
from solrl_core.stages.runner import run_stage
from repo_paths import TINY

FAST = ["explore.seeds_per_prompt=4", "select.k=2", "train.micro_batch=4", "quant.lora_branch=true",
        "explore.precision=nvfp4_emulated", "quant.min_width=0"]  # min_width 0: the LoRA targets are quantized too


@pytest.fixture(scope="module")
def branch_run(tmp_path_factory, one_torch_thread):
    """Iteration 0 done (θ_old trained away from its init); iteration 1's quantize and explore."""
    run = RunDir(tmp_path_factory.mktemp("lora_branch") / "run")
    cfg = prepare_run(run, load_config(TINY, FAST))
    for stage in STAGES:
        run_stage(run, cfg, 0, stage, progress=False)
    for stage in ("quantize", "explore"):
        run_stage(run, cfg, 1, stage, progress=False)
    return run, cfg


def _report(run: RunDir, iteration: int) -> dict:
    return json.loads((run.stage_dir(iteration, "quantize") / "report.json").read_text())


def _velocity(backbone, transformer, cfg, run):
    ctx = StageContext(run, cfg, 1, progress=False)
    x = backbone.initial_noise([3, 4])
    with torch.no_grad():
        return backbone.velocity(transformer, x, torch.full((2,), 0.7), ctx.encode(["a red cube", "a cat"]))


def test_iteration_1_reuses_the_quantized_base(branch_run):
    run, cfg = branch_run
    first, second = _report(run, 0), _report(run, 1)
    assert first["base_from_iteration"] == 0 and second["base_from_iteration"] == 0  # quantized once
    assert first["base_key"] == second["base_key"] == base_key(StageContext(run, cfg, 1))
    assert second["layers"] == first["layers"] and first["totals"]["layers_replaced"] > 0
    assert not (run.stage_dir(1, "quantize") / "merged_old.safetensors").exists()  # no merged copy
    other = load_config(TINY, [*FAST, "quant.weight_format=nvfp4"])
    assert base_key(StageContext(run, other, 1)) != first["base_key"]  # the base depends on the quant settings


def test_explore_follows_the_lora_not_the_base(branch_run):
    run, cfg = branch_run
    backbone = load_backbone(cfg)
    copies = {it: explore_copy(StageContext(run, cfg, it, progress=False), backbone)[0] for it in (0, 1)}
    quantized = {it: dict(m.named_modules()) for it, m in copies.items()}
    branches = [n for n, m in quantized[1].items() if isinstance(m, LoraBranch)]
    assert branches and any(isinstance(quantized[1][n].base_layer, NVFP4EmulatedLinear) for n in branches)
    for name in branches:  # the same 4-bit base, other LoRA factors
        assert torch.equal(quantized[0][name].base_layer.weight, quantized[1][name].base_layer.weight)
    assert any(not torch.equal(quantized[0][n].lora_B, quantized[1][n].lora_B) for n in branches)
    v0, v1 = (_velocity(backbone, copies[it], cfg, run) for it in (0, 1))
    assert (v0 - v1).abs().max() > 1e-3


def test_fp32_branch_equals_the_merged_copy(branch_run):
    """With nothing quantized the branch copy is W0 + B·A·s, i.e. the merged W0 + ΔW(θ_old), up to rounding."""
    run, cfg = branch_run
    fp32 = load_config(TINY, [*FAST, "explore.precision=fp32"])
    ctx = StageContext(run, fp32, 1, progress=False)
    backbone = load_backbone(fp32)
    policy = attach_policy(fp32, backbone)
    load_adapters(policy, previous_checkpoint(ctx))
    merged = fresh_transformer(backbone)
    merged.load_state_dict(policy.merged_state_dict("old"))
    got, want = (_velocity(backbone, m, fp32, run) for m in (explore_copy(ctx, backbone)[0], merged))
    base = _velocity(backbone, backbone.transformer, fp32, run)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert (base - want).abs().max() > 100 * (got - want).abs().max()  # the LoRA is not trivial
