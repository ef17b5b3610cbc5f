"""Regenerate samples with θ_old as a LoRA branch on the shared W0 (no merged copy): the same samples as the merged
full-precision copy W0 + ΔW(θ_old) that the stage used before, up to float rounding."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from solrl_core.config.loading import load_config
from solrl_core.run.pool import read_table
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run_config import prepare_run
from solrl_core.stages import regenerate
from solrl_core.models.backbones.cache import load_backbone
from solrl_core.stages.checkpoints import attach_policy, load_adapters, previous_checkpoint
from solrl_core.stages.context import StageContext
from solrl_core.stages.transformer_copies import fresh_transformer
from solrl_core.stages.old_policy import old_policy_transformer
from solrl_core.stages.runner import run_stage
from repo_paths import TINY

FAST = ["explore.precision=fp32", "explore.seeds_per_prompt=4", "select.k=2", "train.micro_batch=4"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_torch_thread):
    """Iteration 0 done (θ_old trained away from its init), iteration 1 run up to regenerate."""
    run = RunDir(tmp_path_factory.mktemp("branch") / "run")
    cfg = prepare_run(run, load_config(TINY, FAST))
    for stage in STAGES:
        run_stage(run, cfg, 0, stage, progress=False)
    for stage in STAGES[: STAGES.index("regenerate") + 1]:
        run_stage(run, cfg, 1, stage, progress=False)
    return run, cfg


def _merged_copy(ctx: StageContext, backbone) -> torch.nn.Module:
    """Today's way: a second full transformer holding W0 + ΔW(θ_old)."""
    policy = attach_policy(ctx.cfg, backbone)
    load_adapters(policy, previous_checkpoint(ctx))
    transformer = fresh_transformer(backbone)
    transformer.load_state_dict(policy.merged_state_dict("old"))
    return transformer


def test_branch_shares_w0_and_holds_no_copy(trained):
    run, cfg = trained
    backbone = load_backbone(cfg)
    model = old_policy_transformer(StageContext(run, cfg, 1, progress=False), backbone)
    base = {t.untyped_storage().data_ptr() for t in backbone.transformer.state_dict().values()}
    frozen = [p for n, p in model.named_parameters() if "lora_" not in n]
    assert frozen and all(p.untyped_storage().data_ptr() in base for p in frozen)  # W0 itself, not a copy
    assert model.active_adapters() == ["old"]


def test_regenerate_samples_equal_the_merged_copy(trained, tmp_path):
    run, cfg = trained
    ctx = StageContext(run, cfg, 1, progress=False)
    backbone = load_backbone(cfg)
    got = read_table(run.stage_dir(1, "regenerate") / "samples.zarr", ["seed", "latent"])[0]

    plan = regenerate.sampling(ctx)
    dataclasses.replace(plan, path=tmp_path / "merged.zarr", model=_merged_copy).sample(ctx, backbone)
    want = read_table(tmp_path / "merged.zarr", ["seed", "latent"])[0]
    np.testing.assert_array_equal(got["seed"], want["seed"])
    np.testing.assert_allclose(got["latent"], want["latent"], rtol=1e-4, atol=1e-5)

    # the LoRA is not trivial: W0 alone samples visibly different latents
    dataclasses.replace(plan, path=tmp_path / "base.zarr", model=lambda _c, b: b.transformer).sample(ctx, backbone)
    plain = read_table(tmp_path / "base.zarr", ["latent"])[0]["latent"]
    lora_effect, rounding = np.abs(plain - want["latent"]).max(), np.abs(got["latent"] - want["latent"]).max()
    assert lora_effect > 100 * rounding
