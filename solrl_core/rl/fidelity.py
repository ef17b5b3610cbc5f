"""Ranking fidelity of the cheap explore: how well proxy rewards rank seeds compared with the final rewards.

Spearman ρ and Kendall τ-b (scipy's default variant) over all candidates pooled, and optionally the mean of the
per-prompt coefficients. Undefined coefficients (fewer than 3 values, or a constant input) are NaN; no scipy warning
escapes.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

MIN_VALUES = 3


def _defined(a: np.ndarray, b: np.ndarray) -> bool:
    return len(a) >= MIN_VALUES and np.ptp(a) > 0 and np.ptp(b) > 0 and np.isfinite(a).all() and np.isfinite(b).all()


def _pair(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    if not _defined(a, b):
        return float("nan"), float("nan")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return float(stats.spearmanr(a, b).statistic), float(stats.kendalltau(a, b).statistic)


def ranking_fidelity(proxy, final, prompt_index=None) -> dict[str, float | int]:
    """{'spearman', 'kendall'} over all pairs (proxy[i], final[i]); with `prompt_index` also
    'spearman_within_prompt' / 'kendall_within_prompt': the mean over prompt groups of ≥ 3 members whose coefficient is
    defined (NaN when none is), and 'n_prompt_groups': how many groups entered that mean."""
    proxy = np.asarray(proxy, dtype=np.float64)
    final = np.asarray(final, dtype=np.float64)
    if proxy.ndim != 1 or proxy.shape != final.shape:
        raise ValueError(f"proxy and final must be 1-D of equal length, got {proxy.shape} and {final.shape}")
    spearman, kendall = _pair(proxy, final)
    out = {"spearman": spearman, "kendall": kendall}
    if prompt_index is None:
        return out
    prompt_index = np.asarray(prompt_index)
    if prompt_index.shape != proxy.shape:
        raise ValueError(f"prompt_index has shape {prompt_index.shape}, expected {proxy.shape}")
    per_group = within_prompt_pairs(proxy, final, prompt_index)
    if per_group:
        s_mean, k_mean = (float(x) for x in np.mean(per_group, axis=0))
    else:
        s_mean = k_mean = float("nan")
    out.update(spearman_within_prompt=s_mean, kendall_within_prompt=k_mean, n_prompt_groups=len(per_group))
    return out


def within_prompt_pairs(proxy, final, prompt_index) -> list[tuple[float, float]]:
    """(Spearman, Kendall) of each prompt group of >= 3 members whose coefficients are defined, in prompt order."""
    proxy, final, prompt_index = (np.asarray(a) for a in (proxy, final, prompt_index))
    per_group = []
    for prompt in np.unique(prompt_index):
        members = prompt_index == prompt
        if members.sum() >= MIN_VALUES:
            s, k = _pair(proxy[members].astype(np.float64), final[members].astype(np.float64))
            if np.isfinite(s) and np.isfinite(k):
                per_group.append((s, k))
    return per_group
