"""One iteration of Flow-GRPO and of AWM in each family on the embedded model, stage by stage in this process: the rollouts are
SDE rollouts, the samples the update reads carry the SDE window's latents and log-probabilities, and the update
trains the GRPO loss on them: on policy at its first step where full precision sampled them (the ratio is 1 to float
rounding), off policy where the 4-bit copy did (naive_quant). AWM trains on the final samples of the ODE, as
DiffusionNFT does, with its own pairs and terms."""

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

# Flow-GRPO with every step an SDE step (flow_grpo's pickscore_sd3; the testbed's own window is 2 steps) and AWM with
# 3 times per sample (its 6 would be more strata than a 4-step schedule's 3 steps hold)
pytestmark = pytest.mark.slow  # whole iterations or models: `make test` runs it, `make test-fast` not

SMALL = ["prompts.per_iteration=2", "explore.seeds_per_prompt=4", "explore.batch_size=4", "train.micro_batch=16",
         "train.lora_rank=4", "train.lora_alpha=8", "eval.every=0", "eval.rewards=null", "eval.gold=null",
         "tracking.grid_prompts=0", "objective.flow_grpo.window_start=0", "objective.flow_grpo.window_size=null",
         "objective.awm.times_per_sample=3", "objective.name=flow_grpo"]
FAMILY = {  # the family's own sizes: K of N, explore and regenerate steps (SDE rollouts: the explore at the
    # regenerate's, sol_rl cheaper by its 4 bits)
    "baseline": ["explore.seeds_per_prompt=4", "select.k=4", "explore.steps=4"],
    "naive_scaling": ["select.k=2", "explore.steps=4"],
    "naive_quant": ["select.k=2", "explore.steps=4"],
    "sol_rl": ["select.k=2", "explore.steps=4", "regenerate.steps=4", "regenerate.batch_size=2"],
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


@pytest.mark.parametrize("family", list(FAMILY))
def test_one_awm_iteration_per_family(family, tmp_path, one_torch_thread):
    cfg = load_config(ROOT / "configs" / "families" / f"{family}.yaml",
                      [*SMALL[:-1], "objective.name=awm", *FAMILY[family]])
    run = RunDir(tmp_path / "run")
    for stage in STAGES:
        run_stage(run, cfg, 0, stage, progress=False)
    explore, explore_attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr", None)
    assert explore_attrs["sampler"] != "sde" and "trajectory" not in explore  # decoupled: the ODE's samples
    samples, _ = read_table(run.stage_dir(0, "regenerate") / "samples.zarr", None)
    summary = run.manifest(0, "update")["summary"]
    assert summary["objective"] == "awm" and math.isfinite(summary["loss"])
    history = json.loads((run.stage_dir(0, "update") / "metrics.json").read_text())["steps"]
    assert history[0]["pairs"] == len(samples["latent"]) * cfg.objective.awm.times_per_sample
    assert history[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # θ_old = θ before the first step
    assert history[0]["old_kl"] == pytest.approx(0.0, abs=1e-10)


def test_a_window_drawn_per_iteration_is_the_same_in_explore_regenerate_and_update(tmp_path, one_torch_thread):
    """Flow-GRPO-Fast: `window_start` a list, each iteration draws one start from the run seed; the explore and the
    regenerate of the iteration put their one SDE step at that start, and the update trains it."""
    from solrl_core.seeds import derived_generator
    from solrl_core.rl.objectives import objective_for
    from solrl_core.stages.draws import PURPOSE_SDE_WINDOW

    cfg = load_config(ROOT / "configs" / "families" / "sol_rl.yaml",
                      [*SMALL, *FAMILY["sol_rl"], "objective.flow_grpo.window_start=[0,1,2]",
                       "objective.flow_grpo.window_size=1"])
    run = RunDir(tmp_path / "run")
    for stage in STAGES:
        run_stage(run, cfg, 0, stage, progress=False)
    objective = objective_for(cfg)
    drawn = [objective.sde_window(4, derived_generator(cfg.seed, it, PURPOSE_SDE_WINDOW))[0] for it in range(12)]
    assert set(drawn) == {0, 1, 2}  # the iterations do draw different starts
    start = drawn[0]
    _, explore_attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr", None)
    samples, attrs = read_table(run.stage_dir(0, "regenerate") / "samples.zarr", None)
    assert explore_attrs["sde_window"] == [start, start + 1] and attrs["sde_window"] == [start, start + 1]
    assert samples["trajectory"].shape[1] == 2 and samples["log_prob"].shape[1] == 1
    history = json.loads((run.stage_dir(0, "update") / "metrics.json").read_text())["steps"]
    assert history[0]["pairs"] == len(samples["latent"]) and history[0]["ratio_mean"] == pytest.approx(1, abs=1e-5)


TINY_FLUX_SMALL = ["prompts.per_iteration=1", "explore.seeds_per_prompt=4", "explore.batch_size=4", "explore.steps=4",
                   "select.k=2", "regenerate.steps=4", "regenerate.batch_size=2", "train.micro_batch=8",
                   "objective.awm.times_per_sample=2",
                   "train.processes=1", "train.dist_backend=gloo", "model.device=cpu", "model.dtype=float32",
                   "eval.every=0", "tracking.grid_prompts=0", "iterations=1"]


@pytest.fixture(scope="module")
def tiny_flux(tmp_path_factory):
    from solrl_core.tiny_bundle import make_tiny_bundle

    return str(make_tiny_bundle("flux1", tmp_path_factory.mktemp("flux1"))["dir"])


@pytest.mark.parametrize("family", list(FAMILY))
@pytest.mark.parametrize("objective", ["flow_grpo", "awm"])
def test_one_iteration_of_each_objective_and_family_on_a_tiny_flux(objective, family, tiny_flux, tmp_path,
                                                                     one_torch_thread):
    """The FLUX.1 presets of each objective (a peer's values: Flow-GRPO-Fast's one-step window drawn from steps 1–3;
    AWM's 4 times, 2 here, where a 4-step schedule's int(4 · 0.7) = 2 steps hold no more strata) on the tiny
    random-weight FLUX.1, every stage on the CPU."""
    from solrl_core.run_config import prepare_run

    cfg = load_config(ROOT / "configs" / "presets" / objective / f"flux1_{family}_pickscore.yaml",
                      [f"model.path={tiny_flux}", *TINY_FLUX_SMALL])
    run = RunDir(tmp_path / "run")
    prepare_run(run, cfg)
    for stage in STAGES:
        run_stage(run, cfg, 0, stage, progress=False)
    summary = run.manifest(0, "update")["summary"]
    assert summary["objective"] == objective and math.isfinite(summary["loss"])
    samples, attrs = read_table(run.stage_dir(0, "regenerate") / "samples.zarr", None)
    history = json.loads((run.stage_dir(0, "update") / "metrics.json").read_text())["steps"]
    if objective == "flow_grpo":  # one SDE step, its start within the sampled schedule
        start, stop = attrs["sde_window"]
        assert stop - start == 1 and samples["trajectory"].shape[1] == 2
        assert history[0]["pairs"] == len(samples["latent"])
    else:
        assert "trajectory" not in samples and history[0]["pairs"] == 2 * len(samples["latent"])
