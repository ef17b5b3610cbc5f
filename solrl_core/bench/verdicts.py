"""From the per-seed curves of the benchmark to confidence intervals, paired differences and one verdict per claim
of the method (the claims live here, in `CLAIMS`, and nowhere else).

Inputs are the report's plain numbers: per family its curve (`report.family_curves`: steps common to every seed,
and `per_seed` -> seed -> steps, reward, cost_<axis>), the time-to-target target, and per family the audits'
fidelity per seed. Pairing is by training seed: seed s of every family trains on the same prompts and noise.
"""

from __future__ import annotations

import math
from itertools import combinations

from solrl_core.bench.stats import (
    NO_ESTIMATE, UNKNOWN, Estimate, mean_interval, paired_difference, paired_ratio, seed_time_to_target, skewed_mean_interval, verdict_above,
    verdict_at_least,
)

AXES = ("iteration", "cpu", "gpu")
SPEEDUP_BAR = 3.0  # the target: sol_rl reaches the baseline's final reward at >= 3x lower modeled GPU cost
PAPER_FIDELITY = {"spearman": 0.93, "kendall": 0.80}  # the paper's ranking fidelity of the 4-bit explore


def seed_finals(curve: dict) -> dict[int, float]:
    """Per seed, the evaluation value at the family's last step common to every seed."""
    if not curve["steps"]:
        return {}
    step = curve["steps"][-1]
    return {int(seed): float(d["reward"][d["steps"].index(step)]) for seed, d in curve["per_seed"].items()}


def seed_times(curve: dict, target: float, axis: str) -> tuple[dict[int, float], dict[int, bool]]:
    """Per seed, the cost on `axis` at its first evaluation (up to the common last step) reaching `target`, and
    whether it is censored (never reached: its last cost)."""
    times, censored = {}, {}
    last = curve["steps"][-1] if curve["steps"] else -1
    for seed, d in curve["per_seed"].items():
        n = sum(1 for s in d["steps"] if s <= last)
        times[int(seed)], censored[int(seed)] = seed_time_to_target(d["reward"][:n], d[f"cost_{axis}"][:n], target)
    return times, censored


def family_statistics(curve: dict, target: float) -> dict:
    """Final evaluation value (t interval) and time to target on three axes (Hall's skewness-corrected interval) of
    one family."""
    finals = seed_finals(curve)
    starts = [d["reward"][d["steps"].index(0)] for d in curve["per_seed"].values() if 0 in d["steps"]]
    initial = sum(starts) / len(starts) if starts else math.nan  # the seed mean before training
    out = {"final_reward": mean_interval(list(finals.values())).as_dict(), "final_reward_per_seed": finals,
           "initial_reward": initial, "time_to_target": {}}
    for axis in AXES:
        times, cens = seed_times(curve, target, axis) if math.isfinite(target) else ({}, {})
        seeds = sorted(times)
        est = skewed_mean_interval([times[s] for s in seeds], censored=[cens[s] for s in seeds])
        out["time_to_target"][axis] = {**est.as_dict(),
                                       "per_seed": {s: {"value": times[s], "censored": cens[s]} for s in seeds}}
    return out


def _times(stats: dict, axis: str) -> tuple[dict, dict]:
    per = stats["time_to_target"][axis]["per_seed"]
    return {s: v["value"] for s, v in per.items()}, {s: v["censored"] for s, v in per.items()}


def pair_statistics(stats: dict[str, dict]) -> list[dict]:
    """Every pair of families (a, b) in report order: a - b in final value, and a's speed-up to target over b
    (b's cost / a's cost, paired by seed) on each axis, with intervals."""
    rows = []
    for a, b in combinations(stats, 2):
        row = {"a": a, "b": b, "final_reward_diff": paired_difference(
            stats[a]["final_reward_per_seed"], stats[b]["final_reward_per_seed"]).as_dict(), "speedup": {}}
        for axis in AXES:
            ta, ca = _times(stats[a], axis)
            tb, cb = _times(stats[b], axis)
            est = paired_ratio(tb, ta, cb, ca)
            row["speedup"][axis] = {**est.as_dict(), "lower_bound": any(cb.values()), "upper_bound": any(ca.values())}
        rows.append(row)
    return rows


def _fmt_ci(est: dict, digits: int = 3, unit: str = "") -> str:
    if not est or est.get("n", 0) == 0 or est["value"] is None or not math.isfinite(est["value"]):
        return "–"
    return f"{est['value']:.{digits}f}{unit} [{est['lo']:.{digits}f}, {est['hi']:.{digits}f}]"


def target_below_start(stats: dict[str, dict], baseline: str, target: float) -> float | None:
    """The baseline's value before training when the target (its own final value) is not above it: then every seed
    of every family is at the target before training and no time to target means anything. Else None."""
    initial = stats.get(baseline, {}).get("initial_reward", math.nan)
    return initial if math.isfinite(initial) and math.isfinite(target) and target <= initial else None


def _claim(claim: str, test: str, est: dict, verdict: str, detail: str) -> dict:
    return {"claim": claim, "test": test, "estimate": est, "verdict": verdict, "detail": detail}


def _as_estimate(d: dict) -> Estimate:
    return Estimate(d["value"], d["lo"], d["hi"], d["n"], d.get("censored", 0))


def claims(stats: dict[str, dict], pairs: list[dict], baseline: str, margin: float,
           fidelity: dict[str, dict[int, dict]], target: float = math.nan) -> list[dict]:
    """The method's claims, each with its test and verdict from the intervals (see `stats.verdict_*`). Claims
    whose families are not in the benchmark are left out. `fidelity`: family -> seed -> audit means; `target`: the
    time-to-target target (the baseline's final value), checked against the baseline's start."""
    out = []

    def pair(a: str, b: str) -> tuple[dict, float] | None:
        for row in pairs:
            if (row["a"], row["b"]) == (a, b):
                return row, 1.0
            if (row["a"], row["b"]) == (b, a):
                return row, -1.0
        return None

    def diff(a: str, b: str) -> dict | None:
        found = pair(a, b)
        if found is None:
            return None
        d, sign = found[0]["final_reward_diff"], found[1]
        lo, hi = sorted((sign * d["lo"], sign * d["hi"])) if d["n"] else (math.nan, math.nan)
        return {**d, "value": sign * d["value"] if d["n"] else math.nan, "lo": lo, "hi": hi}

    if "sol_rl" in stats and baseline in stats and baseline != "sol_rl":
        ta, ca = _times(stats["sol_rl"], "gpu")
        tb, cb = _times(stats[baseline], "gpu")
        est = paired_ratio(tb, ta, cb, ca)
        lower, upper = any(cb.values()), any(ca.values())
        note = ("; " + baseline + " censored: the ratio is a lower bound") if lower else ""
        note += "; sol_rl censored: the ratio is an upper bound" if upper else ""
        verdict, detail = (verdict_at_least(est, SPEEDUP_BAR, lower_bound=lower, upper_bound=upper),
                           _fmt_ci(est.as_dict(), 2, "x") + note)
        if (start := target_below_start(stats, baseline, target)) is not None:
            est, verdict = NO_ESTIMATE, UNKNOWN
            detail = (f"untestable: {baseline}'s final value {target:.4f} is not above its value before training "
                      f"({start:.4f}), so every seed is at the target before it trains")
        out.append(_claim(
            f"sol_rl reaches {baseline}'s final reward at >= {SPEEDUP_BAR:g}x lower modeled GPU cost",
            f"paired ratio of mean GPU-s to target ({baseline} / sol_rl): CI low >= {SPEEDUP_BAR:g}",
            est.as_dict(), verdict, detail))
    if (d := diff("sol_rl", "naive_scaling")) is not None:
        out.append(_claim(
            "sol_rl's final reward is not below naive_scaling's (matches full-precision scaling)",
            f"paired difference sol_rl - naive_scaling: CI low >= -{margin:g} (margin fixed in the protocol)",
            d, verdict_at_least(_as_estimate(d), -margin), _fmt_ci(d, 4)))
    if (d := diff("sol_rl", "naive_quant")) is not None:
        out.append(_claim(
            "naive_quant (training on the 4-bit samples) ends below sol_rl",
            "paired difference sol_rl - naive_quant: CI entirely above 0",
            d, verdict_above(_as_estimate(d), 0.0), _fmt_ci(d, 4)))
    if baseline != "sol_rl" and (d := diff("sol_rl", baseline)) is not None:
        out.append(_claim(
            f"sol_rl ends above {baseline}",
            f"paired difference sol_rl - {baseline}: CI entirely above 0",
            d, verdict_above(_as_estimate(d), 0.0), _fmt_ci(d, 4)))
    fam = "sol_rl" if "sol_rl" in fidelity else next(iter(fidelity), None)
    for key, bar in PAPER_FIDELITY.items():
        if fam is None:
            break
        per_seed = fidelity[fam]
        within = mean_interval([v.get(f"{key}_within_prompt", math.nan) for v in per_seed.values()]).as_dict()
        pooled = mean_interval([v.get(f"{key}_pooled", math.nan) for v in per_seed.values()]).as_dict()
        out.append(_claim(
            f"{fam}'s 4-bit explore ranks whole prompt groups like full precision: {key} >= {bar} (paper)",
            f"audit {key} within prompt, mean over audits per seed: CI low >= {bar}",
            within, verdict_at_least(_as_estimate(within), bar),
            f"within prompt {_fmt_ci(within)}; pooled {_fmt_ci(pooled)}"))
    return out
