"""Statistics of the benchmark over training seeds (numpy only): percentile-bootstrap confidence intervals, paired
differences between families, time to target with censoring, and the verdict rule.

Every interval is a percentile bootstrap over training seeds: resample the n seeds with replacement `resamples`
times (fixed RNG seed, so a report is reproducible), take the statistic of each resample, and report the
(1 - level)/2 and (1 + level)/2 quantiles. Paired statistics resample the seed *indices* once and apply them to
both families, so a seed's shared prompts and noise stay together.

Censoring. A seed whose curve never reaches the target has no time to target; it is kept at its last observed cost
(what it spent without getting there) with `censored=True`. The mean over seeds is then a *restricted* mean, a lower
bound of the true one, and the report prints it with ">".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
RESAMPLES = 10_000
RNG_SEED = 20261123
# Fewer training seeds than this: no verdict either way. A percentile-bootstrap interval never leaves [min, max] of
# the seeds, and [min, max] of n seeds covers their median with probability 1 - 2 / 2**n: 75% at 3 seeds, 94% at 5.
MIN_SEEDS = 5


@dataclass(frozen=True)
class Estimate:
    """A statistic over training seeds: point estimate, confidence interval, seeds used, censored seeds."""

    value: float
    lo: float
    hi: float
    n: int
    censored: int = 0

    def as_dict(self) -> dict:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "n": self.n, "censored": self.censored}


NO_ESTIMATE = Estimate(math.nan, math.nan, math.nan, 0)


def _resample_indices(n: int, resamples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def _interval(samples: np.ndarray, level: float) -> tuple[float, float]:
    lo, hi = np.quantile(samples, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def bootstrap_mean(values, level: float = LEVEL, resamples: int = RESAMPLES, seed: int = RNG_SEED,
                   censored=None) -> Estimate:
    """Mean over seeds with its percentile-bootstrap interval; NaN entries are dropped (with their censoring flag).
    One value: the interval is that point."""
    v = np.asarray(values, dtype=np.float64)
    c = np.zeros(len(v), dtype=bool) if censored is None else np.asarray(censored, dtype=bool)
    keep = np.isfinite(v)
    v, c = v[keep], c[keep]
    if len(v) == 0:
        return NO_ESTIMATE
    means = v[_resample_indices(len(v), resamples, seed)].mean(axis=1)
    lo, hi = _interval(means, level)
    return Estimate(float(v.mean()), lo, hi, int(len(v)), int(c.sum()))


def paired(a: dict, b: dict) -> tuple[list, np.ndarray, np.ndarray]:
    """The seeds both `a` and `b` (seed -> value) have a finite value for, and the two value arrays in seed order."""
    seeds = sorted(s for s in a if s in b and a[s] is not None and b[s] is not None
                   and np.isfinite(a[s]) and np.isfinite(b[s]))
    return seeds, np.array([a[s] for s in seeds], dtype=np.float64), np.array([b[s] for s in seeds], dtype=np.float64)


def paired_difference(a: dict, b: dict, level: float = LEVEL, resamples: int = RESAMPLES,
                      seed: int = RNG_SEED) -> Estimate:
    """Mean over shared seeds of a[seed] - b[seed] with its bootstrap interval (equal to the difference of the two
    means over those seeds)."""
    _, x, y = paired(a, b)
    return bootstrap_mean(x - y, level, resamples, seed)


def paired_ratio(num: dict, den: dict, num_censored: dict | None = None, den_censored: dict | None = None,
                 level: float = LEVEL, resamples: int = RESAMPLES, seed: int = RNG_SEED) -> Estimate:
    """Ratio of means over shared seeds, mean(num) / mean(den), with a paired bootstrap interval (the same seed
    indices for both). `censored` counts the seeds censored on either side (see `ratio_bound`)."""
    seeds, x, y = paired(num, den)
    if not seeds or np.any(y <= 0):
        return NO_ESTIMATE
    idx = _resample_indices(len(seeds), resamples, seed)
    ratios = x[idx].mean(axis=1) / y[idx].mean(axis=1)
    lo, hi = _interval(ratios, level)
    n_cens = sum(bool((num_censored or {}).get(s)) or bool((den_censored or {}).get(s)) for s in seeds)
    return Estimate(float(x.mean() / y.mean()), lo, hi, len(seeds), n_cens)


def seed_time_to_target(rewards, costs, target: float) -> tuple[float, bool]:
    """Cost at the first evaluation (in step order) whose reward reaches `target`: (cost, False). None reaches it:
    (the last cost observed, True) — censored. No evaluation at all: (nan, True)."""
    last = math.nan
    for r, c in zip(rewards, costs):
        if r is not None and np.isfinite(r) and r >= target:
            return float(c), False
        last = float(c)
    return last, True


# ----------------------------------------------------------------------------------------------- verdicts

HOLDS, FAILS, UNKNOWN = "holds", "does not hold", "cannot tell at this power"


def verdict_at_least(est: Estimate, bar: float, lower_bound: bool = False, upper_bound: bool = False) -> str:
    """Claim "the quantity is >= bar" from its interval: holds when the whole interval is >= bar, does not hold
    when the whole interval is < bar, else cannot tell. `lower_bound`: the estimate may be below the truth
    (censoring), so a failing interval proves nothing; `upper_bound`: it may be above, so a passing one proves
    nothing. Fewer than MIN_SEEDS seeds: cannot tell."""
    if est.n < MIN_SEEDS or not (np.isfinite(est.lo) and np.isfinite(est.hi)):
        return UNKNOWN
    if est.lo >= bar and not upper_bound:
        return HOLDS
    if est.hi < bar and not lower_bound:
        return FAILS
    return UNKNOWN


def verdict_above(est: Estimate, bar: float) -> str:
    """Claim "the quantity is > bar" (strict; e.g. a difference above 0): holds when the whole interval is above
    bar, does not hold when the whole interval is at or below it, else cannot tell (also below MIN_SEEDS seeds)."""
    if est.n < MIN_SEEDS or not (np.isfinite(est.lo) and np.isfinite(est.hi)):
        return UNKNOWN
    if est.lo > bar:
        return HOLDS
    if est.hi <= bar:
        return FAILS
    return UNKNOWN
