"""How often each interval method of `stats` covers the truth, simulated at a given seed count: the figure the
report prints beside its verdicts (the target is >= 0.93 at the nominal 0.95).

Each method runs on the data-generating models that resemble what it is used for in the benchmark: a final value or
a fidelity mean (normal), a cost or a number of iterations to target (right-skewed: log-normal, geometric), a
speed-up (a ratio of two such costs paired by seed). The simulation calls the very functions the report uses
(`stats.t_bounds`, `hall_bounds`, `fieller_bounds`) on `trials` data sets at once, with a fixed RNG seed; its Monte
Carlo standard error is sqrt(p(1-p)/trials), about 0.0015 at the default 20,000 trials.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from solrl_core.bench.stats import LEVEL, fieller_bounds, hall_bounds, t_bounds

TRIALS = 20_000
RNG_SEED = 20261127
TARGET = 0.93  # the coverage a 95% interval must keep in simulation to be used for a verdict


@dataclass(frozen=True)
class Model:
    """A data-generating model: `draw(rng, trials, n)` gives `trials` data sets of n seeds (one array, or a pair
    for a ratio), `truth` the quantity the interval should cover."""

    name: str
    draw: Callable
    truth: float


def _lognormal(sigma: float) -> Model:
    return Model(f"log-normal (σ = {sigma:g})", lambda rng, t, n: rng.lognormal(0.0, sigma, (t, n)),
                 math.exp(sigma * sigma / 2))


def _geometric(p: float) -> Model:
    return Model(f"geometric (p = {p:g}; iterations to target)",
                 lambda rng, t, n: rng.geometric(p, (t, n)).astype(np.float64), 1.0 / p)


def _paired_lognormal(sigma: float, rho: float, ratio: float) -> Model:
    def draw(rng, t, n):
        z = rng.multivariate_normal([0.0, 0.0], [[1.0, rho], [rho, 1.0]], (t, n))
        return ratio * np.exp(sigma * z[..., 0]), np.exp(sigma * z[..., 1])
    return Model(f"paired log-normal costs (σ = {sigma:g}, ρ = {rho:g})", draw, ratio)


def _paired_geometric(p_num: float, p_den: float) -> Model:
    def draw(rng, t, n):
        return rng.geometric(p_num, (t, n)).astype(np.float64), rng.geometric(p_den, (t, n)).astype(np.float64)
    return Model(f"independent geometric iterations (p = {p_num:g} / {p_den:g})", draw, p_den / p_num)


NORMAL = Model("normal", lambda rng, t, n: rng.normal(0.0, 1.0, (t, n)), 0.0)

# method -> (what the benchmark uses it for, its interval function over the last axis, the models it is checked on)
METHODS = {
    "Student t": ("final value, fidelity, paired differences", t_bounds, (NORMAL, _lognormal(0.5))),
    "Hall's skewness-corrected t": ("a family's mean time to target", hall_bounds,
                                    (NORMAL, _lognormal(0.5), _geometric(0.4))),
    "Fieller (paired)": ("speed-ups: ratios of mean times to target", fieller_bounds,
                         (_paired_lognormal(0.5, 0.5, 2.0), _paired_lognormal(0.8, 0.3, 2.0),
                          _paired_geometric(0.3, 0.6))),
}


def coverage(bounds: Callable, model: Model, n: int, trials: int = TRIALS, seed: int = RNG_SEED,
             level: float = LEVEL) -> float:
    """The fraction of `trials` simulated data sets of n seeds whose interval contains the model's truth."""
    data = model.draw(np.random.default_rng(seed), trials, n)
    lo, hi = bounds(*data, level) if isinstance(data, tuple) else bounds(data, level)
    return float(np.mean((lo <= model.truth) & (model.truth <= hi)))


def coverage_table(seed_counts: tuple[int, ...], trials: int = TRIALS) -> list[dict]:
    """One row per method and model: {method, used_for, model, coverage: {n: fraction}}."""
    return [{"method": name, "used_for": used_for, "model": model.name,
             "coverage": {n: coverage(bounds, model, n, trials) for n in seed_counts}}
            for name, (used_for, bounds, models) in METHODS.items() for model in models]
