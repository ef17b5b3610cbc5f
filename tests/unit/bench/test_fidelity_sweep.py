"""The fidelity sweep compares settings on the same prompts and seeds (solrl_core/bench/fidelity_sweep.py)."""


import numpy as np

from solrl_core.bench.fidelity_sweep import Setting, format_sweep, run_sweep, sample_rewards
from solrl_core.config.loading import load_config
from repo_paths import TINY



def test_identical_setting_ranks_perfectly_and_quantization_does_not(one_torch_thread):
    cfg = load_config(TINY)
    reference = Setting("fp32", 4)
    result = run_sweep(cfg, num_prompts=2, seeds_per_prompt=8,
                       settings=(reference, [Setting("fp32", 4, label="same"), Setting("nvfp4_emulated", 3)]))
    same, quant = result["rows"]
    assert same["spearman"] == 1.0 and same["kendall"] == 1.0
    assert same["mean_reward"] == result["reference"]["mean_reward"]
    assert quant["spearman"] < 1.0
    table = format_sweep(result)
    assert "| same | 1.000 | 1.000 | 1.000 | 1.000 |" in table


def test_rewards_follow_the_rows_prompt_and_seed(one_torch_thread):
    cfg = load_config(TINY)
    prompts = ["a red circle", "two blue squares"]
    idx, seeds = np.array([0, 1, 0]), np.array([5, 6, 7])
    full = sample_rewards(cfg, Setting("fp32", 3), prompts, idx, seeds, batch_size=3)
    split = sample_rewards(cfg, Setting("fp32", 3), prompts, idx[1:], seeds[1:], batch_size=1)
    np.testing.assert_allclose(full[1:], split, atol=1e-5)


def test_lora_branch_at_full_precision_ranks_as_the_merged_copy(tmp_path, one_torch_thread):
    """θ_old of a checkpoint: as a branch beside unquantized W0 it samples what the merged copy samples."""
    import pytest
    import torch

    from solrl_core.models.backbones.cache import load_backbone
    from solrl_core.stages.checkpoints import attach_policy, save_adapters

    cfg = load_config(TINY)
    policy = attach_policy(cfg, load_backbone(cfg))
    with torch.no_grad():
        for key, p in policy.named_adapter_parameters("old").items():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(key))))
    save_adapters(policy, tmp_path)
    prompts, idx, seeds = ["a red circle", "two blue squares"], np.array([0, 0, 1, 1]), np.array([1, 2, 3, 4])
    merged, branch = (sample_rewards(cfg, Setting("fp32", 3, lora=lora), prompts, idx, seeds, adapters=tmp_path)
                      for lora in ("merged", "branch"))
    np.testing.assert_allclose(branch, merged, atol=1e-4)
    assert not np.allclose(merged, sample_rewards(cfg, Setting("fp32", 3), prompts, idx, seeds), atol=1e-3)
    with pytest.raises(ValueError, match="give the checkpoint"):
        sample_rewards(cfg, Setting("fp32", 3, lora="merged"), prompts, idx, seeds)
