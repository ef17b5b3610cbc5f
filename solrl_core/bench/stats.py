"""Statistics of the benchmark over training seeds: intervals that keep their coverage at a handful of seeds, paired
differences and ratios between families, time to target with censoring, and the verdict rule.

No resampling and no random numbers: every interval is a closed-form function of the per-seed values, so a verdict
is recomputed by hand from the report's per-seed table and cannot move with an RNG seed. The three methods (each a
function of arrays whose last axis is the seeds, so that `coverage.py` simulates the very code the report runs):

* **Student's t** (`t_bounds`) for means and paired differences (final value, ranking fidelity, a - b per seed):
  mean ± t(n-1) · s / √n. Exact for normal data at any n; a percentile bootstrap covers only ≈ 83 % at 5 seeds.
* **Hall's skewness-corrected t** (`hall_bounds`) for a family's mean time to target, which is positive and
  right-skewed (a slow seed takes several times the others): Hall (1992, "On the removal of skewness by
  transformation", JRSS B 54) inverts the monotone cubic g(T) = T + γT²/3 + γ²T³/27 + γ/(6n) of T = (x̄ - μ)/s,
  γ the sample skewness; with γ = 0 it is the t interval.
* **Fieller's interval** (`fieller_bounds`) for a ratio of means paired by seed (speed-ups): the θ for which the
  paired t-test of mean(x - θ·y) = 0 does not reject at the level. Unbounded (infinite ends) when the denominator's
  mean is not clearly above zero.

Censoring. A seed whose curve never reaches the target has no time to target; it is kept at its last observed cost
(what it spent without getting there) with `censored=True`. The mean over seeds is then a *restricted* mean, a lower
bound of the true one, and the report prints it with ">".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

LEVEL = 0.95
# Fewer training seeds than this: no verdict either way (the protocol's floor; `coverage.py` checks each method's
# coverage from here up).
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


def _t_quantile(n: int, level: float) -> float:
    return float(student_t.ppf((1 + level) / 2, n - 1))


def t_bounds(x: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Student's t interval of the mean over the last axis (n >= 2)."""
    n = x.shape[-1]
    half = _t_quantile(n, level) * x.std(axis=-1, ddof=1) / math.sqrt(n)
    m = x.mean(axis=-1)
    return m - half, m + half


def hall_bounds(x: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Hall's skewness-corrected t interval of the mean over the last axis (n >= 2): the mean is in
    [x̄ - s·g⁻¹(q/√n), x̄ - s·g⁻¹(-q/√n)] with g⁻¹(v) = (3/γ)(∛(1 + γ(v - γ/(6n))) - 1), q the t(n-1) quantile."""
    n = x.shape[-1]
    m = x.mean(axis=-1)
    s = x.std(axis=-1, ddof=1)
    safe_s = np.where(s > 0, s, 1.0)
    gamma = ((x - m[..., None]) ** 3).mean(axis=-1) / safe_s ** 3
    q = _t_quantile(n, level) / math.sqrt(n)

    def g_inverse(v: float) -> np.ndarray:
        shifted = v - gamma / (6 * n)
        small = np.abs(gamma) < 1e-9
        g = np.where(small, 1.0, gamma)
        return np.where(small, shifted, 3.0 / g * (np.cbrt(1.0 + g * shifted) - 1.0))

    return m - s * g_inverse(q), m - s * g_inverse(-q)


def fieller_bounds(x: np.ndarray, y: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Fieller's interval of mean(x) / mean(y), x and y paired along the last axis (n >= 2): the θ with
    (x̄ - θȳ)² <= q²/n · var(x - θy), q the t(n-1) quantile. Infinite ends when ȳ² <= q²/n · var(y)."""
    n = x.shape[-1]
    q2 = _t_quantile(n, level) ** 2 / n
    xm, ym = x.mean(axis=-1), y.mean(axis=-1)
    sxx, syy = x.var(axis=-1, ddof=1), y.var(axis=-1, ddof=1)
    sxy = ((x - xm[..., None]) * (y - ym[..., None])).sum(axis=-1) / (n - 1)
    a = ym * ym - q2 * syy
    b = xm * ym - q2 * sxy  # the quadratic a θ² - 2 b θ + c <= 0
    c = xm * xm - q2 * sxx
    bounded = a > 0
    # the point estimate x̄/ȳ always satisfies the inequality, so the discriminant is >= 0 up to rounding
    root = np.sqrt(np.maximum(b * b - a * c, 0.0))
    safe_a = np.where(bounded, a, 1.0)
    return np.where(bounded, (b - root) / safe_a, -np.inf), np.where(bounded, (b + root) / safe_a, np.inf)


def _finite(values, censored) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(values, dtype=np.float64)
    c = np.zeros(len(v), dtype=bool) if censored is None else np.asarray(censored, dtype=bool)
    keep = np.isfinite(v)
    return v[keep], c[keep]


def _estimate(v: np.ndarray, c: np.ndarray, bounds, level: float) -> Estimate:
    if len(v) == 0:
        return NO_ESTIMATE
    if len(v) == 1:  # one seed: no spread to measure, no interval
        return Estimate(float(v[0]), math.nan, math.nan, 1, int(c.sum()))
    lo, hi = bounds(v, level)
    return Estimate(float(v.mean()), float(lo), float(hi), int(len(v)), int(c.sum()))


def mean_interval(values, level: float = LEVEL, censored=None) -> Estimate:
    """Mean over seeds with its Student t interval; NaN entries are dropped (with their censoring flag)."""
    v, c = _finite(values, censored)
    return _estimate(v, c, t_bounds, level)


def skewed_mean_interval(values, level: float = LEVEL, censored=None) -> Estimate:
    """Mean over seeds of a positive, right-skewed quantity (a time to target) with Hall's skewness-corrected t
    interval; NaN entries are dropped (with their censoring flag)."""
    v, c = _finite(values, censored)
    return _estimate(v, c, hall_bounds, level)


def paired(a: dict, b: dict) -> tuple[list, np.ndarray, np.ndarray]:
    """The seeds both `a` and `b` (seed -> value) have a finite value for, and the two value arrays in seed order."""
    seeds = sorted(s for s in a if s in b and a[s] is not None and b[s] is not None
                   and np.isfinite(a[s]) and np.isfinite(b[s]))
    return seeds, np.array([a[s] for s in seeds], dtype=np.float64), np.array([b[s] for s in seeds], dtype=np.float64)


def paired_difference(a: dict, b: dict, level: float = LEVEL) -> Estimate:
    """Mean over shared seeds of a[seed] - b[seed] with its t interval (equal to the difference of the two means
    over those seeds)."""
    _, x, y = paired(a, b)
    return mean_interval(x - y, level)


def paired_ratio(num: dict, den: dict, num_censored: dict | None = None, den_censored: dict | None = None,
                 level: float = LEVEL) -> Estimate:
    """Ratio of means over shared seeds, mean(num) / mean(den), with Fieller's paired interval. `censored` counts
    the seeds censored on either side (see `verdict_at_least`)."""
    seeds, x, y = paired(num, den)
    if not seeds or np.any(y <= 0):
        return NO_ESTIMATE
    n_cens = sum(bool((num_censored or {}).get(s)) or bool((den_censored or {}).get(s)) for s in seeds)
    value = float(x.mean() / y.mean())
    if len(seeds) == 1:
        return Estimate(value, math.nan, math.nan, 1, n_cens)
    lo, hi = fieller_bounds(x, y, level)
    return Estimate(value, float(lo), float(hi), len(seeds), n_cens)


def seed_time_to_target(rewards, costs, target: float) -> tuple[float, bool]:
    """Cost at the first evaluation (in step order) whose reward reaches `target`: (cost, False). None reaches it:
    (the last cost observed, True) — censored. No evaluation at all: (nan, True)."""
    last = math.nan
    for r, c in zip(rewards, costs):
        if r is not None and np.isfinite(r) and r >= target:
            return float(c), False
        last = float(c)
    return last, True


# ----------------------------------------------------------------------------------------------- power

POWER = 0.8


def minimal_detectable(sd: float, n: int, level: float = LEVEL, power: float = POWER) -> float:
    """The smallest true mean (of a quantity over seeds, e.g. a paired difference) that a t interval at `level` over
    `n` seeds with standard deviation `sd` excludes 0 with probability `power`: (t_(1+level)/2 + t_power) · sd / √n,
    both quantiles of t(n - 1) (the usual approximation of the t test's power). NaN below 2 seeds."""
    if n < 2 or not math.isfinite(sd):
        return math.nan
    return float((_t_quantile(n, level) + student_t.ppf(power, n - 1)) * sd / math.sqrt(n))


def seeds_to_resolve(sd: float, effect: float, level: float = LEVEL, power: float = POWER,
                     most: int = 100_000) -> int | None:
    """The fewest seeds whose `minimal_detectable` reaches |effect| (at least 2); None when `effect` is 0 or the spread
    unknown, or more than `most` would be needed."""
    if not (math.isfinite(sd) and math.isfinite(effect)) or effect == 0:
        return None
    if sd == 0:
        return 2

    def enough(n: int) -> bool:
        return minimal_detectable(sd, n, level, power) <= abs(effect)

    hi = 2
    while not enough(hi):  # the detectable difference falls with n: double, then bisect
        hi *= 2
        if hi > 2 * most:
            return None
    lo = max(2, hi // 2)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid + 1, hi)
    return lo if lo <= most else None


# ----------------------------------------------------------------------------------------------- verdicts

HOLDS, FAILS, UNKNOWN = "holds", "does not hold", "cannot tell at this power"


def verdict_at_least(est: Estimate, bar: float, lower_bound: bool = False, upper_bound: bool = False) -> str:
    """Claim "the quantity is >= bar" from its interval: holds when the whole interval is >= bar, does not hold
    when the whole interval is < bar, else cannot tell. `lower_bound`: the estimate may be below the truth
    (censoring), so a failing interval proves nothing; `upper_bound`: it may be above, so a passing one proves
    nothing. Fewer than MIN_SEEDS seeds: cannot tell."""
    if est.n < MIN_SEEDS or math.isnan(est.lo) or math.isnan(est.hi):
        return UNKNOWN
    if est.lo >= bar and not upper_bound:
        return HOLDS
    if est.hi < bar and not lower_bound:
        return FAILS
    return UNKNOWN


def verdict_above(est: Estimate, bar: float) -> str:
    """Claim "the quantity is > bar" (strict; e.g. a difference above 0): holds when the whole interval is above
    bar, does not hold when the whole interval is at or below it, else cannot tell (also below MIN_SEEDS seeds)."""
    if est.n < MIN_SEEDS or math.isnan(est.lo) or math.isnan(est.hi):
        return UNKNOWN
    if est.lo > bar:
        return HOLDS
    if est.hi <= bar:
        return FAILS
    return UNKNOWN
