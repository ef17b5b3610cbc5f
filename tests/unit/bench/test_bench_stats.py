"""The benchmark's statistics (bootstrap intervals, paired differences, censoring) on hand-computable cases, the
verdict per claim on constructed inputs, and the bench config's protocol keys (--quick, margin, seeds)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from repo_paths import ROOT
from solrl_core.bench.bench_config import load_bench_config
from solrl_core.bench.report import eval_key
from solrl_core.bench.stats import (
    FAILS, HOLDS, MIN_SEEDS, UNKNOWN, Estimate, bootstrap_mean, paired_difference, paired_ratio, seed_time_to_target,
    verdict_above, verdict_at_least,
)
from solrl_core.bench.verdicts import claims, family_statistics, pair_statistics
from solrl_core.errors import ConfigError


def test_bootstrap_of_identical_values_is_a_point():
    est = bootstrap_mean([0.4, 0.4, 0.4, 0.4, 0.4])
    assert (est.value, est.lo, est.hi, est.n) == (pytest.approx(0.4),) * 3 + (5,)


def test_bootstrap_interval_brackets_the_mean_within_the_values_and_is_reproducible():
    values = [0.1, 0.5, 0.2, 0.9, 0.3]
    a, b = bootstrap_mean(values), bootstrap_mean(values)
    assert a == b  # fixed RNG seed
    assert a.value == pytest.approx(0.4)
    assert min(values) <= a.lo < a.value < a.hi <= max(values)
    # two values: resample means are x, (x+y)/2 or y with probabilities 1/4, 1/2, 1/4 -> the 95% interval is [x, y]
    two = bootstrap_mean([1.0, 3.0])
    assert (two.lo, two.hi) == (1.0, 3.0)
    assert bootstrap_mean([math.nan, 2.0]).n == 1 and bootstrap_mean([]).n == 0


def test_paired_difference_is_the_difference_of_means_over_shared_seeds():
    a = {0: 0.5, 1: 0.7, 2: 0.6, 3: 0.9}
    b = {0: 0.4, 1: 0.5, 2: 0.6, 4: 0.1}  # seed 3 and 4 unpaired: left out
    est = paired_difference(a, b)
    assert est.n == 3
    assert est.value == pytest.approx(np.mean([0.5, 0.7, 0.6]) - np.mean([0.4, 0.5, 0.6]))
    # a constant shift between families has a point interval, however spread the seeds are
    shifted = paired_difference({s: v + 0.05 for s, v in a.items()}, a)
    assert (shifted.lo, shifted.hi) == (pytest.approx(0.05), pytest.approx(0.05))


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
    est = bootstrap_mean([10.0, 20.0, 30.0], censored=[False, True, False])
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
    curves = {  # final values per seed; diffusionnft reaches 0.50 at step 4, sol_rl at step 1, at 0.8 the GPU cost
        "diffusionnft": _curve({s: [0.1, 0.2, 0.3, 0.4, 0.50 + 0.01 * (s - 2)] for s in seeds}, 10.0),
        "naive_scaling": _curve({s: [0.1, 0.3, 0.4, 0.5, 0.60 + 0.01 * s] for s in seeds}, 40.0),
        "naive_quant": _curve({s: [0.1, 0.2, 0.5, 0.6, 0.70 + 0.01 * s] for s in seeds}, 20.0),
        "sol_rl": _curve({s: [0.1, 0.55, 0.6, 0.6, 0.61 + 0.01 * s] for s in seeds}, 8.0),
    }
    target = 0.50  # diffusionnft's mean final
    stats = {f: family_statistics(c, target) for f, c in curves.items()}
    # diffusionnft seeds 0 and 1 end below 0.50: censored at 4 iterations (40 GPU-s), the others reach it at 4
    assert stats["diffusionnft"]["time_to_target"]["gpu"]["censored"] == 2
    assert stats["sol_rl"]["time_to_target"]["gpu"]["value"] == pytest.approx(8.0)
    pairs = pair_statistics(stats)
    assert [(p["a"], p["b"]) for p in pairs][:3] == [("diffusionnft", "naive_scaling"), ("diffusionnft", "naive_quant"),
                                                      ("diffusionnft", "sol_rl")]
    fidelity = {"sol_rl": {s: {"spearman_within_prompt": 0.95, "kendall_within_prompt": 0.6 + 0.1 * (s % 2),
                               "spearman_pooled": 0.9, "kendall_pooled": 0.7} for s in seeds}}
    out = {c["claim"]: c for c in claims(stats, pairs, "diffusionnft", 0.01, fidelity)}
    verdict = {word: next(c for k, c in out.items() if word in k)["verdict"]
               for word in ("3x", "naive_scaling", "naive_quant", "above diffusionnft", "spearman", "kendall")}
    # 40 / 8 = 5x in every seed; diffusionnft's censored seeds only make the true ratio larger: holds
    assert next(c for k, c in out.items() if "3x" in k)["estimate"]["value"] == pytest.approx(5.0)
    assert verdict == {
        "3x": HOLDS,
        "naive_scaling": HOLDS,  # sol_rl - naive_scaling = +0.01 in every seed, above -margin
        "naive_quant": FAILS,  # naive_quant ends 0.09 above sol_rl in every seed
        "above diffusionnft": HOLDS,  # +0.13 in every seed
        "spearman": HOLDS,  # 0.95 in every seed >= 0.93
        "kendall": FAILS,  # 0.6 / 0.7 < 0.80
    }


def test_a_censored_sol_rl_cannot_confirm_the_speedup():
    seeds = range(MIN_SEEDS)
    curves = {"diffusionnft": _curve({s: [0.1, 0.2, 0.3, 0.5] for s in seeds}, 10.0),
              "sol_rl": _curve({s: [0.1, 0.2, 0.2, 0.5 if s else 0.2] for s in seeds}, 1.0)}
    stats = {f: family_statistics(c, 0.5) for f, c in curves.items()}
    out = claims(stats, pair_statistics(stats), "diffusionnft", 0.01, {})
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
    assert full.seeds >= 5 and full.eval_every == 1
    assert full.overrides["eval.num_prompts"] * full.overrides["eval.seeds_per_prompt"] >= 200
    assert full.seeds >= MIN_SEEDS and quick.iterations < full.iterations and quick.run_root != full.run_root


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
    from flows.cli import main

    assert main(["bench", str(_bench_yaml(tmp_path)), "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--quick needs a 'quick' section" in err
    # the quick protocol of the shipped config, nothing trained yet: the command to run names --quick
    assert main(["bench", str(ROOT / "configs" / "bench.yaml"), "--quick", "--report-only",
                 "--run-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bench.yaml --quick" in err
