"""Explore policies and `solrl calibrate-explore` (solrl_core/planner/explore_policies.py) on the embedded model: the
candidates the family accepts, the fidelity figures recomputed with scipy from rewards sampled by the sampler itself,
a cache's FLOPs counted, the Pareto front and the pick, the written config that trains, and the step cache's own
promises (batch-independent, fresh per sampling run)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from scipy import stats

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.models.backbones.cache import load_backbone
from solrl_core.models.sampler import sample
from solrl_core.models.step_cache import cache_config, enable_step_cache
from solrl_core.planner import explore_policies as ep

pytestmark = pytest.mark.slow  # whole iterations or models: `make test` runs it, `make test-fast` not

TS = {"cache_interval": 2, "disable_cache_before_step": 2}


def test_candidates_are_what_the_family_accepts():
    sol = load_config(TINY)  # sol_rl, explore 3 steps, regenerate 4
    labels = {p.label() for p in ep.candidate_policies(sol)}
    assert "nvfp4_emulated @ 3" in labels and "full precision @ 1" in labels
    assert "full precision @ 4" not in labels  # the reference itself
    assert f"full precision @ 4 + taylorseer(cache_interval=2, disable_cache_before_step=2)" in labels  # cheaper
    assert not any("taylorseer" in p.label() and p.steps < 4 for p in ep.candidate_policies(sol))
    quant = load_config(TINY, ["family=naive_quant", "regenerate.enabled=false"])
    assert {p.precision for p in ep.candidate_policies(quant)} == {"nvfp4_emulated", "fp8_emulated"}
    scaling = load_config(TINY, ["family=naive_scaling", "regenerate.enabled=false", "explore.precision=fp32"])
    assert {p.precision for p in ep.candidate_policies(scaling)} == {"fp32"}


def test_full_precision_step_candidates_and_sde_rollouts_keep_the_regenerate_steps():
    sol = load_config(TINY)  # explore 3 steps, regenerate 4
    labels = {p.label() for p in ep.candidate_policies(sol)}
    assert {"nvfp4_emulated @ 4 (first 1 at full precision)", "fp8_emulated @ 3 (last 1 at full precision)",
            "nvfp4_emulated @ 4 (first 1 at full precision, last 1 at full precision)"} <= labels
    assert not any(p.full_first + p.full_last + 1 >= p.steps for p in ep.candidate_policies(sol)
                   if p.full_first or p.full_last)  # two steps or more left in low precision
    assert not any(p.precision == "fp32" and (p.full_first or p.full_last) for p in ep.candidate_policies(sol))
    # an SDE sample at 3 steps is another image than at 4: Flow-GRPO's candidates all sample the regenerate's steps
    sde = load_config(TINY, ["objective.name=flow_grpo", "explore.steps=4"])
    candidates = ep.candidate_policies(sde)
    assert candidates and {p.steps for p in candidates} == {4}
    assert {p.precision for p in candidates} == {"nvfp4_emulated", "fp8_emulated", "fp32"}
    assert any(p.full_first for p in candidates) and any(p.cache != "none" for p in candidates)
    written = load_config_text_of(ep.written_config(sde, {"policy": vars(candidates[0])}))
    assert written.explore.guardrail.enabled and {rung[1] for rung in written.explore.guardrail.ladder} == {4}


def load_config_text_of(text: str):
    from solrl_core.config.loading import load_config_text

    return load_config_text(text)


def test_full_precision_steps_cost_between_the_precisions():
    cfg = load_config(TINY, ["explore.steps=4"])
    low, first, full = (ep.modelled_seconds(cfg, policy, ("h100",), 1.0)["h100"] for policy in (
        ep.ExplorePolicy("fp8_emulated", 4), ep.ExplorePolicy("fp8_emulated", 4, full_first=1),
        ep.ExplorePolicy("fp32", 4)))
    assert low < first < full


def test_the_step_cache_is_batch_independent_and_fresh_per_run(one_torch_thread):
    cfg = load_config(TINY)
    backbone = load_backbone(cfg)
    cond = backbone.encode_prompts(["a red circle", "a blue square", "a green star", "two red circles"])
    noise = backbone.initial_noise([1, 2, 3, 4])
    plain = sample(backbone, backbone.transformer, cond, noise, 6).x0
    cached = enable_step_cache(copy.deepcopy(backbone.transformer), "taylorseer", TS)
    whole = sample(backbone, cached, cond, noise, 6).x0
    halves = torch.cat([sample(backbone, cached, {k: v[:2] for k, v in cond.items()}, noise[:2], 6).x0,
                        sample(backbone, cached, {k: v[2:] for k, v in cond.items()}, noise[2:], 6).x0])
    # a seed's sample does not depend on its batch mates (to the float rounding of another batch size's matmuls,
    # as without a cache; a data-dependent cache would skip steps for the whole batch)
    torch.testing.assert_close(whole, halves, rtol=1e-5, atol=1e-5)
    assert torch.equal(whole, sample(backbone, cached, cond, noise, 6).x0)  # each run starts from nothing
    assert not torch.equal(whole, plain)  # it did skip work
    assert not hasattr(backbone.transformer, "enable_cache")  # the shared model is untouched


def test_cache_settings_are_checked_in_one_line():
    assert cache_config("none", {}) is None
    assert cache_config("taylorseer", TS).taylor_factors_dtype == torch.float32
    with pytest.raises(ConfigError, match="'interval' is not a TaylorSeer option"):
        cache_config("taylorseer", {"interval": 2})
    with pytest.raises(ConfigError, match="explore.cache.kind"):
        load_config(TINY, ["explore.cache.kind=first_block"])


def test_calibration_figures_recomputed_from_the_sampled_rewards(one_torch_thread):
    cfg = load_config(TINY)
    policies = [ep.ExplorePolicy("fp8_emulated", 2), ep.ExplorePolicy("fp32", 4, "taylorseer", TS),
                ep.ExplorePolicy("fp32", 4)]  # the last is the reference itself: fidelity 1
    result = ep.calibrate(cfg, num_prompts=3, seeds_per_prompt=6, gpus=("h100", "b200"), policies=policies,
                          batch_size=8)
    rows = {r["label"]: r for r in result["rows"]}
    backbone = load_backbone(cfg)
    batch = ep.calibration_batch(cfg, 3, 6)
    ref, _ = ep.sample_rewards(cfg, backbone, backbone.transformer, ep.reference_policy(cfg), batch, 8)
    proxy, _ = ep.sample_rewards(cfg, backbone, ep.policy_transformer(backbone, cfg, policies[0]), policies[0],
                                 batch, 8)
    within = [stats.spearmanr(proxy[batch.prompt_index == p], ref[batch.prompt_index == p]).statistic
              for p in range(3)]
    assert rows["fp8_emulated @ 2"]["spearman_within_prompt"] == pytest.approx(np.nanmean(within))
    low = stats.t.interval(0.95, 2, loc=np.mean(within), scale=stats.sem(within))[0]
    assert rows["fp8_emulated @ 2"]["spearman_within_prompt_low"] == pytest.approx(low)
    assert rows["full precision @ 4"]["spearman_within_prompt"] == pytest.approx(1.0)
    assert rows["full precision @ 4"]["topk_overlap"] == rows["full precision @ 4"]["bottomk_overlap"] == 1.0
    cached = rows["full precision @ 4 + taylorseer(cache_interval=2, disable_cache_before_step=2)"]
    assert 0 < cached["flop_ratio"] < 1  # the attention of the skipped steps is not computed
    for gpu in ("h100", "b200"):
        assert cached["modelled_seconds"][gpu] < rows["full precision @ 4"]["modelled_seconds"][gpu]
    # the planner's 4-bit on Hopper is FP8 (no NVFP4): the same modelled cost as fp8 at the same steps
    assert rows["fp8_emulated @ 2"]["modelled_seconds"]["h100"] < rows["full precision @ 4"]["modelled_seconds"]["h100"]


def test_a_stopped_calibration_resumes_at_its_first_policy_not_measured(tmp_path, monkeypatch, one_torch_thread):
    """Each policy's rewards are kept as it finishes; stopped at the second policy and run again, the calibration
    samples only what was not measured and gives the uninterrupted result; another batch measures again."""
    cfg = load_config(TINY)
    policies = [ep.ExplorePolicy("fp8_emulated", 2), ep.ExplorePolicy("nvfp4_emulated", 3)]
    whole = ep.calibrate(cfg, num_prompts=3, seeds_per_prompt=6, gpus=("h100",), policies=policies, batch_size=8)
    sample, sampled = ep.sample_rewards, []

    def stop_at_the_second(cfg, backbone, transformer, policy, *args, **kwargs):
        if policy == policies[1]:
            raise KeyboardInterrupt
        sampled.append(policy)
        return sample(cfg, backbone, transformer, policy, *args, **kwargs)

    monkeypatch.setattr(ep, "sample_rewards", stop_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        ep.calibrate(cfg, num_prompts=3, seeds_per_prompt=6, gpus=("h100",), policies=policies, batch_size=8,
                     keep=tmp_path)
    assert sampled == [ep.reference_policy(cfg), policies[0]]

    def count(cfg, backbone, transformer, policy, *args, **kwargs):
        sampled.append(policy)
        return sample(cfg, backbone, transformer, policy, *args, **kwargs)

    monkeypatch.setattr(ep, "sample_rewards", count)
    sampled.clear()
    lines = []
    resumed = ep.calibrate(cfg, num_prompts=3, seeds_per_prompt=6, gpus=("h100",), policies=policies, batch_size=8,
                           keep=tmp_path, say=lines.append)
    assert sampled == [policies[1]]
    assert [r["spearman_within_prompt"] for r in resumed["rows"]] == \
        [r["spearman_within_prompt"] for r in whole["rows"]]
    assert lines[0].startswith("reference full precision @ 4") and lines[0].endswith("(measured before)")
    assert lines[1].startswith("policy 1 of 2: fp8_emulated @ 2: Spearman within prompt ")
    assert lines[1].endswith("(measured before)") and lines[2].startswith("policy 2 of 2: nvfp4_emulated @ 3")
    sampled.clear()  # fresh seeds: nothing kept applies
    ep.calibrate(cfg, num_prompts=3, seeds_per_prompt=6, gpus=("h100",), policies=policies, batch_size=8,
                 seed_offset=1, keep=tmp_path)
    assert len(sampled) == 3


def test_a_sibling_is_a_candidate_with_its_own_flops(tmp_path, one_torch_thread):
    """Another model as an explore policy: the sibling with the model's own weights ranks exactly as the model at the
    same steps and costs the same; a smaller one is priced by the FLOPs it leaves; the written config names it."""
    from siblings import write_shallow_sibling

    from solrl_core.models.backbones.embedded import PRETRAINED_DIR

    cfg = load_config(TINY)
    shallow = write_shallow_sibling(tmp_path / "shallow")
    labels = {p.label() for p in ep.candidate_policies(cfg, (shallow,))}
    assert {"sibling shallow, full precision @ 1", "sibling shallow, fp8_emulated @ 4"} <= labels
    policies = [ep.ExplorePolicy("fp32", 2), ep.ExplorePolicy("fp32", 2, sibling=str(PRETRAINED_DIR)),
                ep.ExplorePolicy("fp32", 2, sibling=shallow)]
    result = ep.calibrate(cfg, num_prompts=3, seeds_per_prompt=6, gpus=("h100",), policies=policies, batch_size=8)
    plain, same, small = result["rows"]
    assert same["spearman_within_prompt"] == plain["spearman_within_prompt"] and same["flop_ratio"] == 1.0
    assert same["modelled_seconds"] == plain["modelled_seconds"]
    assert 0 < small["flop_ratio"] < 0.5  # one transformer block of four
    assert small["modelled_seconds"]["h100"] < plain["modelled_seconds"]["h100"]
    (tmp_path / "w.yaml").write_text(ep.written_config(cfg, small))
    written = load_config(tmp_path / "w.yaml")
    assert written.explore.sibling.path == shallow and written.explore.steps == 2
    assert written.explore.guardrail.enabled


def _row(label, spearman, cost, low):
    return {"label": label, "spearman_within_prompt": spearman, "spearman_within_prompt_low": low,
            "modelled_seconds": {"h100": cost, "b200": cost / 2},
            "policy": {"precision": "fp32", "steps": 4, "cache": "none", "cache_options": {}}}


def test_pareto_front_and_pick_by_the_lower_end_of_the_interval():
    rows = [_row("a", 0.5, 1.0, 0.4), _row("b", 0.8, 2.0, 0.72), _row("c", 0.7, 3.0, 0.6), _row("d", 0.95, 4.0, 0.9)]
    ep.mark_pareto(rows, "h100")
    assert [r["pareto"] for r in rows] == [True, True, False, True]  # c: b is cheaper and ranks better
    result = {"gpus": ["h100", "b200"], "rows": rows}
    assert ep.pick(result, 0.7)["label"] == "b"
    assert ep.pick(result, 0.75)["label"] == "d"  # b's mean is 0.8, but its interval reaches down to 0.72
    assert ep.pick(result, 0.95) is None
    with pytest.raises(SolrlError, match="was not priced"):
        ep.pick(result, 0.5, gpu="a100")


def test_the_interval_over_prompts_is_students_t():
    values = [0.9, 0.7, 0.8, 0.95, 0.6]
    low, high = ep.prompt_interval(values)
    expected = stats.t.interval(0.95, 4, loc=np.mean(values), scale=stats.sem(values))
    assert (low, high) == pytest.approx(expected)
    assert np.isnan(ep.prompt_interval([0.5])[0])


def test_calibrate_explore_writes_a_config_that_trains(tmp_path, monkeypatch, capsys, one_torch_thread):
    """The command on the embedded model (a few policies, small batch): table, JSON and plot, and a written config
    with the chosen policy and the guardrail on, which loads and trains an iteration."""
    from solrl.cli.main import main
    from solrl_core.run.rundir import STAGES, RunDir
    from solrl_core.run_config import prepare_run
    from solrl_core.stages.runner import run_stage

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ep, "candidate_policies", lambda cfg, siblings=(): [
        ep.ExplorePolicy("fp8_emulated", 2), ep.ExplorePolicy("nvfp4_emulated", 3),
        ep.ExplorePolicy("fp32", 4, "taylorseer", TS)])
    assert main(["calibrate-explore", str(TINY), "--prompts", "3", "--seeds", "6", "--min-spearman", "-1",
                 "--write", "calibrated.yaml", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "chosen (cheapest on h100" in out and (tmp_path / "runs/calibrate-explore/tiny/pareto.png").stat().st_size
    cfg = load_config(tmp_path / "calibrated.yaml", ["iterations=1"])
    assert (cfg.explore.precision, cfg.explore.steps, cfg.explore.cache.kind) == ("fp8_emulated", 2, "none")
    assert cfg.explore.guardrail.enabled and cfg.name == "tiny_calibrated"
    run = RunDir(tmp_path / "run")
    prepare_run(run, cfg)
    for stage in STAGES:
        run_stage(run, cfg, 0, stage, progress=False)
    assert run.manifest(0, "explore")["summary"]["precision"] == "fp8_emulated"
    assert main(["calibrate-explore", str(TINY), "--prompts", "3", "--seeds", "6", "--write", "calibrated.yaml",
                 "--quiet"]) == 2  # the file exists
    assert "calibrated.yaml exists" in capsys.readouterr().err


def test_an_explore_with_full_precision_steps_runs_in_the_pipeline(tmp_path, one_torch_thread):
    """explore.full_precision_first/_last in a run: its first and last steps sample θ_old at full precision, so its
    samples lie between the all-4-bit explore's and the full-precision one's; the pool and report say so."""
    from solrl_core.run.pool import read_table
    from solrl_core.run.rundir import RunDir
    from solrl_core.stages.runner import run_stage

    latents = {}
    selective = ["explore.full_precision_first=1", "explore.full_precision_last=1"]
    for name, overrides in {"4bit": [], "selective": selective, "full": ["explore.precision=fp32"]}.items():
        cfg = load_config(TINY, ["explore.steps=4", "family=naive_quant", "regenerate.enabled=false", *overrides]
                          if name != "full" else ["explore.steps=4", "family=naive_scaling",
                                                  "regenerate.enabled=false", *overrides])
        run = RunDir(tmp_path / name)
        run_stage(run, cfg, 0, "quantize", progress=False)
        run_stage(run, cfg, 0, "explore", progress=False)
        table, attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr", ["latent"])
        latents[name] = table["latent"]
        if name == "selective":
            assert attrs["full_precision_steps"] == [1, 1]
            assert run.manifest(0, "quantize")["summary"]["precision"] == "nvfp4_emulated"
    off_4bit = np.abs(latents["4bit"] - latents["full"]).mean()
    off_selective = np.abs(latents["selective"] - latents["full"]).mean()
    assert 0 < off_selective < off_4bit
    with pytest.raises(ConfigError, match="change nothing"):
        load_config(TINY, ["explore.precision=fp32", "explore.full_precision_first=1"])
    with pytest.raises(ConfigError, match=r"cover all 3 explore steps"):
        load_config(TINY, ["explore.full_precision_first=2", "explore.full_precision_last=1"])


def test_a_cached_explore_runs_in_the_pipeline(tmp_path, one_torch_thread):
    """explore.cache in a run: the explore copy samples with it; a guardrail escalation would drop it."""
    from solrl_core.run.pool import read_table
    from solrl_core.run.rundir import RunDir
    from solrl_core.stages.runner import run_stage

    run = RunDir(tmp_path / "run")
    cached = load_config(TINY, ["explore.steps=5", "explore.cache.kind=taylorseer",
                                "explore.cache.options={cache_interval: 2, disable_cache_before_step: 2}"])
    plain = load_config(TINY, ["explore.steps=5"])
    run_stage(run, cached, 0, "quantize", progress=False)
    run_stage(run, cached, 0, "explore", progress=False)
    with_cache = read_table(run.stage_dir(0, "explore") / "pool.zarr", ["latent", "seed"])[0]
    other = RunDir(tmp_path / "plain")
    run_stage(other, plain, 0, "quantize", progress=False)
    run_stage(other, plain, 0, "explore", progress=False)
    without = read_table(other.stage_dir(0, "explore") / "pool.zarr", ["latent", "seed"])[0]
    np.testing.assert_array_equal(with_cache["seed"], without["seed"])
    assert not np.array_equal(with_cache["latent"], without["latent"])


def test_an_editing_config_is_calibrated_on_its_sources(one_torch_thread):
    """The calibration batch of an edit prompt set keeps each prompt's source images: the model is conditioned on
    them (its guidance's unconditional branch too) and the edit reward scores against them, as in a run."""
    from repo_paths import ROOT
    from solrl_core.edit_sources import load_images, source_array
    from solrl_core.rewards.registry import score_images

    cfg = load_config(ROOT / "configs" / "demo_edit.yaml", ["guidance.rollout=2"])
    batch = ep.calibration_batch(cfg, 2, 2)
    assert batch.sources is not None and len(batch.sources) == 2
    backbone = load_backbone(cfg)
    policy = ep.reference_policy(cfg)
    rewards, _ = ep.sample_rewards(cfg, backbone, backbone.transformer, policy, batch, 4)
    rows = list(range(4))
    sources = [batch.sources[i] for i in batch.prompt_index[rows]]
    images = [load_images(s) for s in sources]
    texts = [batch.prompts[i] for i in batch.prompt_index[rows]]
    x0 = sample(backbone, backbone.transformer, backbone.encode_prompts(texts, images),
                backbone.initial_noise(batch.seeds[rows].tolist()), policy.steps, guidance=2.0,
                uncond=backbone.encode_prompts([""] * 4, images)).x0
    decoded = backbone.decode(x0)
    expected = score_images(decoded, texts, cfg.rewards, cfg.reward_models,
                            source_array(sources, *decoded.shape[1:3]))[0]
    np.testing.assert_allclose(rewards, expected, rtol=0, atol=1e-6)
