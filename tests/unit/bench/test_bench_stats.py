"""The benchmark's statistics (t, Hall and Fieller intervals, paired differences, censoring) against independent
computations (scipy's t interval, the paired t-test a Fieller interval inverts, Hall's forward transform), their
simulated coverage, the verdict per claim on constructed inputs, and the bench config's protocol keys (--quick,
margin, seeds)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from scipy import stats as scipy_stats

from repo_paths import ROOT
from solrl_core.bench.bench_config import load_bench_config
from solrl_core.bench.coverage import METHODS, NORMAL, TARGET, TRIALS, coverage, coverage_table
from solrl_core.bench.report import eval_key
from solrl_core.bench.stats import (
    FAILS, HOLDS, LEVEL, MIN_SEEDS, UNKNOWN, Estimate, hall_bounds, mean_interval, minimal_detectable,
    paired_difference, paired_ratio, seed_time_to_target, skewed_mean_interval, verdict_above, verdict_at_least,
)
from solrl_core.bench.verdicts import claims, family_statistics, pair_statistics
from solrl_core.errors import ConfigError


def test_t_interval_is_scipys_and_identical_values_give_a_point():
    values = [0.71, 0.74, 0.735, 0.752, 0.728, 0.741, 0.719, 0.733]
    est = mean_interval(values)
    lo, hi = scipy_stats.t.interval(LEVEL, len(values) - 1, loc=np.mean(values), scale=scipy_stats.sem(values))
    assert (est.lo, est.hi, est.n) == (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12), 8)
    point = mean_interval([0.4] * 5)
    assert (point.value, point.lo, point.hi) == (pytest.approx(0.4),) * 3
    one = mean_interval([math.nan, 2.0])  # one seed: a value, no interval, no verdict
    assert one.n == 1 and one.value == 2.0 and math.isnan(one.lo) and mean_interval([]).n == 0
    assert verdict_at_least(one, 1.0) == UNKNOWN


def test_hall_interval_inverts_halls_transform_and_leans_towards_the_long_tail():
    x = np.array([1.0, 1.0, 2.0, 2.0, 3.0, 7.0, 1.0, 2.0])  # iterations to target: one slow seed
    est = skewed_mean_interval(x)
    n, m, s = len(x), x.mean(), x.std(ddof=1)
    gamma = np.mean((x - m) ** 3) / s ** 3

    def g(t):  # Hall (1992): the forward transform, computed independently of stats.hall_bounds' inverse
        return t + gamma * t ** 2 / 3 + gamma ** 2 * t ** 3 / 27 + gamma / (6 * n)

    q = scipy_stats.t.ppf((1 + LEVEL) / 2, n - 1)
    assert math.sqrt(n) * g((m - est.lo) / s) == pytest.approx(q, rel=1e-9)
    assert math.sqrt(n) * g((m - est.hi) / s) == pytest.approx(-q, rel=1e-9)
    t_est = mean_interval(x)
    assert est.hi - m > t_est.hi - m and m - est.lo < m - t_est.lo  # right-skewed: the interval moves right
    symmetric = np.array([1.0, 2.0, 3.0, 4.0, 5.0])  # skewness 0: the t interval
    lo, hi = hall_bounds(symmetric)
    assert (lo, hi) == (pytest.approx(mean_interval(symmetric).lo), pytest.approx(mean_interval(symmetric).hi))


def test_fieller_interval_is_where_the_paired_t_test_does_not_reject():
    num = {s: v for s, v in enumerate([40.0, 55.0, 30.0, 62.0, 48.0, 35.0])}
    den = {s: v for s, v in enumerate([16.0, 20.0, 14.0, 19.0, 22.0, 12.0])}
    est = paired_ratio(num, den)
    x, y = np.array(list(num.values())), np.array(list(den.values()))
    assert est.value == pytest.approx(x.mean() / y.mean())

    def p_value(theta):  # the paired t-test of mean(x - theta * y) = 0
        return scipy_stats.ttest_1samp(x - theta * y, 0.0).pvalue

    assert p_value(est.lo) == pytest.approx(1 - LEVEL, rel=1e-6)
    assert p_value(est.hi) == pytest.approx(1 - LEVEL, rel=1e-6)
    assert p_value(est.value) == pytest.approx(1.0)
    assert p_value(est.lo * 0.99) < 1 - LEVEL < p_value(est.lo * 1.01)
    assert p_value(est.hi * 1.01) < 1 - LEVEL < p_value(est.hi * 0.99)
    # a denominator whose mean is not clearly above 0: the interval is unbounded and no verdict follows
    noisy = paired_ratio({0: 5.0, 1: 6.0, 2: 5.5, 3: 4.0, 4: 6.5}, {0: 0.1, 1: 9.0, 2: 0.2, 3: 0.1, 4: 0.1})
    assert math.isinf(noisy.hi) and verdict_at_least(noisy, 3.0) == UNKNOWN


def test_paired_difference_is_the_difference_of_means_over_shared_seeds():
    a = {0: 0.5, 1: 0.7, 2: 0.6, 3: 0.9}
    b = {0: 0.4, 1: 0.5, 2: 0.6, 4: 0.1}  # seed 3 and 4 unpaired: left out
    est = paired_difference(a, b)
    assert est.n == 3
    assert est.value == pytest.approx(np.mean([0.5, 0.7, 0.6]) - np.mean([0.4, 0.5, 0.6]))
    # a constant shift between families has a point interval, however spread the seeds are
    shifted = paired_difference({s: v + 0.05 for s, v in a.items()}, a)
    assert (shifted.lo, shifted.hi) == (pytest.approx(0.05), pytest.approx(0.05))


def test_t_coverage_recomputed_independently_at_five_seeds():
    """The simulated coverage of the report's t interval equals scipy's on the same draws, and is 0.95 within
    four Monte Carlo standard errors; the percentile bootstrap it replaced covers about 0.83 on the same data."""
    n, trials = MIN_SEEDS, TRIALS
    ours = coverage(METHODS["Student t"][1], NORMAL, n, trials, seed=7)
    data = NORMAL.draw(np.random.default_rng(7), trials, n)
    lo, hi = scipy_stats.t.interval(LEVEL, n - 1, loc=data.mean(axis=1), scale=scipy_stats.sem(data, axis=1))
    theirs = float(np.mean((lo <= 0.0) & (0.0 <= hi)))
    assert ours == pytest.approx(theirs, abs=2 / trials)
    assert abs(ours - LEVEL) < 4 * math.sqrt(LEVEL * (1 - LEVEL) / trials)
    idx = np.random.default_rng(8).integers(0, n, (2000, 500, n))  # 500 resamples of each of 2000 data sets
    boot = data[np.arange(2000)[:, None, None], idx].mean(axis=-1)
    blo, bhi = np.quantile(boot, [(1 - LEVEL) / 2, (1 + LEVEL) / 2], axis=1)
    assert np.mean((blo <= 0.0) & (0.0 <= bhi)) < 0.88


def test_every_verdict_method_keeps_its_coverage_at_the_seed_floor():
    """Student t and Fieller decide verdicts: >= TARGET on the models they are used for at MIN_SEEDS seeds."""
    table = coverage_table((MIN_SEEDS,), trials=8000)
    assert {r["method"] for r in table} == set(METHODS)
    for row in table:
        cov = row["coverage"][MIN_SEEDS]
        if row["method"] == "Fieller (paired)" or row["model"] == NORMAL.name:
            assert cov >= TARGET, row
        assert 0.85 < cov <= 1.0, row


def test_paired_ratio_is_the_ratio_of_means_and_counts_censored_seeds():
    est = paired_ratio({0: 40.0, 1: 40.0}, {0: 24.0, 1: 16.0}, num_censored={0: True, 1: False})
    assert est.value == pytest.approx(2.0) and est.censored == 1 and est.lo <= 2.0 <= est.hi
    assert paired_ratio({0: 1.0}, {0: 0.0}).n == 0  # no cost: no ratio


def test_time_to_target_at_one_evaluation_resolution_and_censoring():
    assert seed_time_to_target([0.1, 0.3, 0.5, 0.4], [0, 10, 20, 30], 0.5) == (20.0, False)
    assert seed_time_to_target([0.1, 0.3, math.nan], [0, 10, 20], 0.3) == (10.0, False)
    assert seed_time_to_target([0.1, 0.2], [0, 10], 0.5) == (10.0, True)  # never: censored at the last cost
    value, censored = seed_time_to_target([], [], 0.5)
    assert math.isnan(value) and censored
    est = skewed_mean_interval([10.0, 20.0, 30.0], censored=[False, True, False])
    assert est.censored == 1 and est.value == pytest.approx(20.0)


def test_verdict_rules():
    n = MIN_SEEDS
    assert verdict_at_least(Estimate(3.5, 3.1, 3.9, n), 3.0) == HOLDS
    assert verdict_at_least(Estimate(2.0, 1.5, 2.9, n), 3.0) == FAILS
    assert verdict_at_least(Estimate(3.0, 2.5, 3.5, n), 3.0) == UNKNOWN
    assert verdict_at_least(Estimate(3.5, 3.1, 3.9, n - 1), 3.0) == UNKNOWN  # too few seeds
    # censoring: a lower bound cannot refute, an upper bound cannot confirm
    assert verdict_at_least(Estimate(2.0, 1.5, 2.9, n, 1), 3.0, lower_bound=True) == UNKNOWN
    assert verdict_at_least(Estimate(3.5, 3.1, 3.9, n, 1), 3.0, upper_bound=True) == UNKNOWN
    assert verdict_above(Estimate(0.02, 0.01, 0.03, n), 0.0) == HOLDS
    assert verdict_above(Estimate(-0.02, -0.03, 0.0, n), 0.0) == FAILS
    assert verdict_above(Estimate(0.0, -0.01, 0.01, n), 0.0) == UNKNOWN


def _curve(per_seed_rewards: dict[int, list[float]], gpu_per_iteration: float) -> dict:
    steps = list(range(len(next(iter(per_seed_rewards.values())))))
    return {"steps": steps, "per_seed": {
        s: {"steps": steps, "reward": r, "cost_iteration": [float(i) for i in steps],
            "cost_cpu": [float(i) for i in steps], "cost_gpu": [gpu_per_iteration * i for i in steps]}
        for s, r in per_seed_rewards.items()}}


def test_verdicts_from_constructed_curves():
    seeds = range(MIN_SEEDS)
    curves = {  # final values per seed; baseline reaches 0.50 at step 4, sol_rl at step 1, at 0.8 the GPU cost
        "baseline": _curve({s: [0.1, 0.2, 0.3, 0.4, 0.50 + 0.01 * (s - 2)] for s in seeds}, 10.0),
        "naive_scaling": _curve({s: [0.1, 0.3, 0.4, 0.5, 0.60 + 0.01 * s] for s in seeds}, 40.0),
        "naive_quant": _curve({s: [0.1, 0.2, 0.5, 0.6, 0.70 + 0.01 * s] for s in seeds}, 20.0),
        "sol_rl": _curve({s: [0.1, 0.55, 0.6, 0.6, 0.61 + 0.01 * s] for s in seeds}, 8.0),
    }
    target = 0.50  # baseline's mean final
    stats = {f: family_statistics(c, target) for f, c in curves.items()}
    # baseline seeds 0 and 1 end below 0.50: censored at 4 iterations (40 GPU-s), the others reach it at 4
    assert stats["baseline"]["time_to_target"]["gpu"]["censored"] == 2
    assert stats["sol_rl"]["time_to_target"]["gpu"]["value"] == pytest.approx(8.0)
    pairs = pair_statistics(stats)
    assert [(p["a"], p["b"]) for p in pairs][:3] == [("baseline", "naive_scaling"), ("baseline", "naive_quant"),
                                                      ("baseline", "sol_rl")]
    fidelity = {"sol_rl": {s: {"spearman_within_prompt": 0.95, "kendall_within_prompt": 0.6 + 0.1 * (s % 2),
                               "spearman_pooled": 0.9, "kendall_pooled": 0.7} for s in seeds}}
    out = {c["claim"]: c for c in claims(stats, pairs, "baseline", 0.01, fidelity)}
    verdict = {word: next(c for k, c in out.items() if word in k)["verdict"]
               for word in ("3x", "naive_scaling", "naive_quant", "above baseline", "spearman", "kendall")}
    # 40 / 8 = 5x in every seed; baseline's censored seeds only make the true ratio larger: holds
    assert next(c for k, c in out.items() if "3x" in k)["estimate"]["value"] == pytest.approx(5.0)
    assert verdict == {
        "3x": HOLDS,
        "naive_scaling": HOLDS,  # sol_rl - naive_scaling = +0.01 in every seed, above -margin
        "naive_quant": FAILS,  # naive_quant ends 0.09 above sol_rl in every seed
        "above baseline": HOLDS,  # +0.13 in every seed
        "spearman": HOLDS,  # 0.95 in every seed >= 0.93
        "kendall": FAILS,  # 0.6 / 0.7 < 0.80
    }


def test_a_censored_sol_rl_cannot_confirm_the_speedup():
    seeds = range(MIN_SEEDS)
    curves = {"baseline": _curve({s: [0.1, 0.2, 0.3, 0.5] for s in seeds}, 10.0),
              "sol_rl": _curve({s: [0.1, 0.2, 0.2, 0.5 if s else 0.2] for s in seeds}, 1.0)}
    stats = {f: family_statistics(c, 0.5) for f, c in curves.items()}
    out = claims(stats, pair_statistics(stats), "baseline", 0.01, {})
    speed = next(c for c in out if "3x" in c["claim"])
    assert speed["estimate"]["value"] == pytest.approx(10.0) and speed["verdict"] == UNKNOWN
    assert "upper bound" in speed["detail"]


def test_gold_is_ranked_on_when_present():
    assert eval_key({"reward": 0.4, "gold": 0.3, "embedded": 0.3}) == "gold"
    assert eval_key({"reward": 0.4, "embedded": 0.4}) == "reward"


def _bench_yaml(tmp_path, **keys):
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump({"families": [str(ROOT / "configs" / "families" / "sol_rl.yaml")],
                                    "iterations": 8, "seeds": 5, "eval_every": 1, **keys}))
    return path


def test_quick_protocol_replaces_the_keys_and_is_labelled(tmp_path):
    path = _bench_yaml(tmp_path, quick={"seeds": 3, "iterations": 3, "overrides": {"eval.seeds_per_prompt": 4}},
                       overrides={"eval.seeds_per_prompt": 8, "eval.num_prompts": 26})
    full, _ = load_bench_config(path)
    quick, _ = load_bench_config(path, quick=True)
    assert (full.protocol, full.seeds, full.iterations) == ("full", 5, 8)
    assert (quick.protocol, quick.seeds, quick.iterations) == ("quick", 3, 3)
    assert quick.overrides == {"eval.seeds_per_prompt": 4, "eval.num_prompts": 26}
    assert load_bench_config(path, ["seeds=4"], quick=True)[0].seeds == 4  # --set still wins


def test_shipped_bench_config_meets_the_protocol():
    full, _ = load_bench_config(ROOT / "configs" / "bench.yaml")
    quick, _ = load_bench_config(ROOT / "configs" / "bench.yaml", quick=True)
    # the speed-up protocol (#43): the baseline against sol_rl over the verdicts' floor of seeds, at the demo's
    # scale, fewer and larger evaluations (416 samples every 4 iterations), a pre-registered target above the start
    assert [f.split("/")[-1] for f in full.families] == ["baseline.yaml", "sol_rl.yaml"]
    assert full.seeds >= MIN_SEEDS and full.eval_every == 4 and full.target_gain > 0
    assert full.overrides["eval.num_prompts"] * full.overrides["eval.seeds_per_prompt"] >= 400
    assert full.seeds >= MIN_SEEDS and quick.iterations < full.iterations and quick.run_root != full.run_root
    families, _ = load_bench_config(ROOT / "configs" / "bench_families.yaml")
    assert len(families.families) == 4 and families.seeds == full.seeds and families.run_root != full.run_root


@pytest.mark.parametrize("keys, message", [
    ({"seeds": 0}, "seeds"),
    ({"margin": -0.1}, "margin"),
    ({"protocol": "quick"}, "protocol is set by --quick"),
])
def test_bad_protocol_keys_are_one_line_config_errors(tmp_path, keys, message):
    with pytest.raises(ConfigError) as exc:
        load_bench_config(_bench_yaml(tmp_path, **keys))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_quick_without_its_section_or_with_unknown_keys_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="--quick needs a 'quick' section"):
        load_bench_config(_bench_yaml(tmp_path), quick=True)
    with pytest.raises(ConfigError, match="sedes"):
        load_bench_config(_bench_yaml(tmp_path, quick={"sedes": 3}), quick=True)


def test_solrl_bench_quick_errors_are_one_line(tmp_path, capsys):
    from solrl.cli.main import main

    assert main(["bench", str(_bench_yaml(tmp_path)), "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--quick needs a 'quick' section" in err
    # the quick protocol of the shipped config, nothing trained yet: the command to run names --quick
    assert main(["bench", str(ROOT / "configs" / "bench.yaml"), "--quick", "--report-only",
                 "--run-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bench.yaml --quick" in err


def test_a_baseline_that_does_not_rise_leaves_its_seeds_censored_never_the_claim_untestable():
    """The target is pre-registered (the baseline's start + a gain), so a baseline that ends below its start never
    reaches it: its seeds are censored at their last cost, the speed-up a lower bound, and sol_rl reaching the
    target at a fifth of that cost confirms the claim. No verdict says untestable."""
    seeds = range(MIN_SEEDS)
    curves = {"baseline": _curve({s: [0.50, 0.52, 0.49 - 0.01 * (s % 2)] for s in seeds}, 10.0),
              "sol_rl": _curve({s: [0.50, 0.55, 0.56] for s in seeds}, 2.0)}
    target = 0.50 + 0.03
    stats = {f: family_statistics(c, target) for f, c in curves.items()}
    assert stats["baseline"]["time_to_target"]["gpu"]["censored"] == MIN_SEEDS
    out = claims(stats, pair_statistics(stats), "baseline", 0.01, {}, target)
    speed = next(c for c in out if "3x" in c["claim"])
    assert "0.5300" in speed["claim"] and "lower bound" in speed["detail"]
    assert speed["estimate"]["value"] == pytest.approx(20.0 / 2.0) and speed["verdict"] == HOLDS
    assert not any("untestable" in c["detail"] for c in out)


def test_a_difference_that_cannot_be_told_states_its_power():
    seeds = range(MIN_SEEDS)
    noise = [0.02, -0.03, 0.01, 0.025, -0.015]
    curves = {"baseline": _curve({s: [0.50, 0.55, 0.60] for s in seeds}, 10.0),
              "sol_rl": _curve({s: [0.50, 0.56, 0.605 + noise[s]] for s in seeds}, 12.0)}
    stats = {f: family_statistics(c, 0.53) for f, c in curves.items()}
    above = next(c for c in claims(stats, pair_statistics(stats), "baseline", 0.01, {}, 0.53)
                 if "above baseline" in c["claim"])
    sd = float(np.std(np.array(noise) + 0.005, ddof=1))
    detectable = (scipy_stats.t.ppf(0.975, 4) + scipy_stats.t.ppf(0.8, 4)) * sd / math.sqrt(5)
    assert above["verdict"] == UNKNOWN and above["estimate"]["power"]["detectable"] == pytest.approx(detectable)
    assert f"5 seeds detect a mean difference of {detectable:.4f}" in above["detail"]
    need = above["estimate"]["power"]["seeds_for_effect"]
    assert need > 5 and minimal_detectable(sd, need) <= 0.007 < minimal_detectable(sd, need - 1)


def test_the_flow_grpo_bench_trains_plain_and_cheap_explore_with_flow_grpo_under_the_same_protocol():
    from solrl_core.bench.bench_config import bench_runs

    path = ROOT / "configs" / "bench_flow_grpo.yaml"
    grpo, _ = load_bench_config(path)
    full, _ = load_bench_config(ROOT / "configs" / "bench.yaml")
    runs = bench_runs(grpo, path.parent)
    assert {r.label for r in runs} == {"baseline", "sol_rl"} and len(runs) == 2 * grpo.seeds
    assert {r.cfg.objective.name for r in runs} == {"flow_grpo"}
    same = ("iterations", "seeds", "eval_every", "audit_every", "margin", "target_gain")
    assert [getattr(grpo, k) for k in same] == [getattr(full, k) for k in same]
    assert {k: v for k, v in grpo.overrides.items() if k not in ("objective.name", "explore.steps")} == full.overrides
    assert {r.cfg.explore.steps for r in runs} == {10}  # SDE rollouts: the explore on the regenerate's schedule
