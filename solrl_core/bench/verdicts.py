"""From the per-seed curves of the benchmark to confidence intervals, paired differences and one verdict per claim
of the method (the claims live here, in `CLAIMS`, and nowhere else).

Inputs are the report's plain numbers: per family its curve (`report.family_curves`: steps common to every seed,
and `per_seed` -> seed -> steps, reward, cost_<axis>), the time-to-target target, and per family the audits'
fidelity per seed. Pairing is by training seed: seed s of every family trains on the same prompts and noise.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np

from solrl_core.bench.stats import (
    FAILS, HOLDS, MIN_SEEDS, UNKNOWN, Estimate, mean_interval, minimal_detectable, paired, paired_difference,
    paired_ratio, seed_time_to_target, seeds_to_resolve, skewed_mean_interval, verdict_above, verdict_at_least,
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


def _claim(claim: str, test: str, est: dict, verdict: str, detail: str) -> dict:
    return {"claim": claim, "test": test, "estimate": est, "verdict": verdict, "detail": detail}


def _as_estimate(d: dict) -> Estimate:
    return Estimate(d["value"], d["lo"], d["hi"], d["n"], d.get("censored", 0))


def difference_power(a: dict, b: dict, effect: float) -> dict:
    """The power of a paired difference a - b (seed -> value): the spread of the per-seed differences, the smallest
    mean difference these seeds detect 80% of the time, and how many seeds would resolve `effect`."""
    _, x, y = paired(a, b)
    sd = float(np.std(x - y, ddof=1)) if len(x) > 1 else math.nan
    return {"sd": sd, "seeds": len(x), "detectable": minimal_detectable(sd, len(x)), "effect": effect,
            "seeds_for_effect": seeds_to_resolve(sd, effect)}


def power_text(power: dict, what: str) -> str:
    """How a cannot-tell verdict falls short, in words: what this many seeds detect, and what `what` would need."""
    if not math.isfinite(power.get("detectable", math.nan)):
        return "power: fewer than 2 seeds"
    need = power["seeds_for_effect"]
    needed = f"~{need} seeds" if need is not None else "more seeds than a benchmark can train"
    return (f"power: {power['seeds']} seeds detect a mean difference of {power['detectable']:.4f} 80% of the time "
            f"(paired sd {power['sd']:.4f}); {what} ({abs(power['effect']):.4f}) would need {needed}")


def claims(stats: dict[str, dict], pairs: list[dict], baseline: str, margin: float,
           fidelity: dict[str, dict[int, dict]], target: float = math.nan) -> list[dict]:
    """The method's claims, each with its test and verdict from the intervals (see `stats.verdict_*`), and for a
    difference that cannot be told its power. Claims whose families are not in the benchmark are left out.
    `margin`: the relative bound of "within" (the paper's 1%); `fidelity`: family -> seed -> audit means; `target`:
    the pre-registered time-to-target target."""
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

    def finals(fam: str) -> dict:
        return stats[fam]["final_reward_per_seed"]

    def detail(d: dict, verdict: str, power: dict, what: str) -> str:
        return _fmt_ci(d, 4) + ("; " + power_text(power, what) if verdict == UNKNOWN else "")

    if "sol_rl" in stats and baseline in stats and baseline != "sol_rl":
        ta, ca = _times(stats["sol_rl"], "gpu")
        tb, cb = _times(stats[baseline], "gpu")
        est = paired_ratio(tb, ta, cb, ca)
        lower, upper = any(cb.values()), any(ca.values())
        note = ("; " + baseline + " censored: the ratio is a lower bound") if lower else ""
        note += "; sol_rl censored: the ratio is an upper bound" if upper else ""
        verdict = verdict_at_least(est, SPEEDUP_BAR, lower_bound=lower, upper_bound=upper)
        out.append(_claim(
            f"sol_rl reaches the target ({target:.4f}) at >= {SPEEDUP_BAR:g}x lower modeled GPU cost than {baseline}",
            f"paired ratio of mean GPU-s to target ({baseline} / sol_rl): CI low >= {SPEEDUP_BAR:g}",
            est.as_dict(), verdict, _fmt_ci(est.as_dict(), 2, "x") + note))
    if (d := diff("sol_rl", "naive_scaling")) is not None:
        bound = margin * abs(stats["naive_scaling"]["final_reward"]["value"])
        verdict = verdict_at_least(_as_estimate(d), -bound)
        power = difference_power(finals("sol_rl"), finals("naive_scaling"), bound)
        out.append(_claim(
            f"sol_rl's final reward is not more than {100 * margin:g}% below naive_scaling's (the paper: within ~1%)",
            f"paired difference sol_rl - naive_scaling: CI low >= -{bound:.4f} ({100 * margin:g}% of naive_scaling's "
            "final)", {**d, "power": power}, verdict, detail(d, verdict, power, f"a {100 * margin:g}% difference")))
    if (d := diff("sol_rl", "naive_quant")) is not None:
        verdict = verdict_above(_as_estimate(d), 0.0)
        power = difference_power(finals("sol_rl"), finals("naive_quant"), d["value"])
        out.append(_claim(
            "naive_quant (training on the 4-bit samples) ends below sol_rl",
            "paired difference sol_rl - naive_quant: CI entirely above 0",
            {**d, "power": power}, verdict, detail(d, verdict, power, "the observed difference")))
    if baseline != "sol_rl" and (d := diff("sol_rl", baseline)) is not None:
        verdict = verdict_above(_as_estimate(d), 0.0)
        power = difference_power(finals("sol_rl"), finals(baseline), d["value"])
        out.append(_claim(
            f"sol_rl ends above {baseline}",
            f"paired difference sol_rl - {baseline}: CI entirely above 0",
            {**d, "power": power}, verdict, detail(d, verdict, power, "the observed difference")))
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
