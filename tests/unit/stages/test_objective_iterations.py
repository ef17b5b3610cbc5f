"""One iteration of Flow-GRPO in each family on the embedded model, stage by stage in this process: the rollouts are
SDE rollouts, the samples the update reads carry the SDE window's latents and log-probabilities, and the update
trains the GRPO loss on them: on policy at its first step where full precision sampled them (the ratio is 1 to float
rounding), off policy where the 4-bit copy did (naive_quant)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from repo_paths import ROOT
from solrl_core.config.loading import load_config
from solrl_core.run.pool import read_table
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.stages.runner import run_stage

SMALL = ["prompts.per_iteration=2", "explore.seeds_per_prompt=4", "explore.batch_size=4", "train.micro_batch=16",
         "train.lora_rank=4", "train.lora_alpha=8", "eval.every=0", "eval.rewards=null", "eval.gold=null",
         "tracking.grid_prompts=0", "objective.name=flow_grpo"]
FAMILY = {  # the family's own sizes: K of N, explore and regenerate steps
    "diffusionnft": ["explore.seeds_per_prompt=4", "select.k=4", "explore.steps=4"],
    "naive_scaling": ["select.k=2", "explore.steps=4"],
    "naive_quant": ["select.k=2", "explore.steps=4"],
    "sol_rl": ["select.k=2", "explore.steps=3", "regenerate.steps=4", "regenerate.batch_size=2"],
}


@pytest.mark.parametrize("family", list(FAMILY))
def test_one_flow_grpo_iteration_per_family(family, tmp_path, one_torch_thread):
    cfg = load_config(ROOT / "configs" / "families" / f"{family}.yaml", [*SMALL, *FAMILY[family]])
    run = RunDir(tmp_path / "run")
    for stage in STAGES:
        run_stage(run, cfg, 0, stage, progress=False)
    explore, explore_attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr", None)
    assert explore_attrs["sampler"] == "sde" and explore_attrs["noise_level"] == 0.7
    assert ("trajectory" in explore) == (not cfg.regenerate.enabled)  # kept where the update trains on the pool
    samples, attrs = read_table(run.stage_dir(0, "regenerate") / "samples.zarr", None)
    steps = cfg.regenerate.steps if cfg.regenerate.enabled else cfg.explore.steps
    n = len(samples["latent"])
    assert attrs["sde_window"] == [0, steps]
    assert samples["trajectory"].shape == (n, steps + 1, *samples["latent"].shape[1:])
    assert samples["log_prob"].shape == (n, steps) and np.isfinite(samples["log_prob"]).all()
    np.testing.assert_array_equal(samples["trajectory"][:, -1], samples["latent"])
    summary = run.manifest(0, "update")["summary"]
    assert summary["objective"] == "flow_grpo" and math.isfinite(summary["loss"])
    history = json.loads((run.stage_dir(0, "update") / "metrics.json").read_text())["steps"]
    assert history[0]["pairs"] == n * int(steps * 0.99)
    if family == "naive_quant":  # the 4-bit copy sampled them: its log-probabilities are not the trained θ's
        assert abs(history[0]["ratio_mean"] - 1.0) > 1e-4
    else:  # θ sampled them at full precision, θ trains: on policy
        assert history[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)


def test_a_flow_grpo_update_of_samples_without_trajectories_says_so(tmp_path, one_torch_thread):
    """Samples made under DiffusionNFT carry no trajectory: a flow_grpo update of them says so in one line."""
    from solrl_core.errors import SolrlError

    nft = load_config(ROOT / "configs" / "families" / "naive_scaling.yaml",
                      [*SMALL[:-1], *FAMILY["naive_scaling"]])
    run = RunDir(tmp_path / "run")
    for stage in STAGES[:-1]:
        run_stage(run, nft, 0, stage, progress=False)
    grpo = load_config(ROOT / "configs" / "families" / "naive_scaling.yaml", [*SMALL, *FAMILY["naive_scaling"]])
    with pytest.raises(SolrlError, match="no trajectory column, which objective 'flow_grpo' trains on"):
        run_stage(run, grpo, 0, "update", progress=False)
