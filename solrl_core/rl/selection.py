"""Which explored seeds are regenerated and trained on: per-prompt selection of candidates by proxy reward.

Ranking inside a prompt group: reward descending, ties broken by candidate index ascending (the lower index ranks
higher). "Best" are the first of that order and "worst" the last, so one total order serves every mode.
"""

from __future__ import annotations

import numpy as np
import torch

SELECTION_MODES = ("best_worst", "random", "top", "all", "extremes_random")


def _ranked(rewards: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Candidate indices of one group, best first (ties: lower index first)."""
    return members[np.lexsort((members, -rewards[members]))]


def _random_pick(pool: np.ndarray, count: int, generator: torch.Generator) -> np.ndarray:
    perm = torch.randperm(len(pool), generator=generator).numpy()
    return pool[perm[:count]]


def select_candidates(
    rewards: np.ndarray,
    prompt_index: np.ndarray,
    k: int,
    mode: str,
    generator: torch.Generator | None = None,
) -> np.ndarray:
    """Indices (into `rewards`, sorted ascending) of the candidates kept, `k` per prompt group.

    Modes:
      - ``best_worst``: the k/2 best and k/2 worst of each group (k even).
      - ``random``: k uniformly at random without replacement (needs `generator`).
      - ``top``: the k best.
      - ``all``: every candidate; `k` is ignored.
      - ``extremes_random``: floor(k/4) best + floor(k/4) worst, the remaining k - 2*floor(k/4) uniformly at random
        from the candidates in between (needs `generator`).
    Groups are visited in ascending prompt id, so a given generator state gives the same choice on every run.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    prompt_index = np.asarray(prompt_index)
    if mode not in SELECTION_MODES:
        raise ValueError(f"unknown selection mode {mode!r}; expected one of {', '.join(SELECTION_MODES)}")
    if rewards.ndim != 1 or prompt_index.shape != rewards.shape:
        raise ValueError(
            f"rewards and prompt_index must be 1-D of equal length, got {rewards.shape} and {prompt_index.shape}"
        )
    if np.isnan(rewards).any():
        raise ValueError(f"rewards contain NaN at candidate(s) {np.flatnonzero(np.isnan(rewards))[:10].tolist()}")
    if len(rewards) == 0 or mode == "all":
        return np.arange(len(rewards), dtype=np.int64)
    k = int(k)
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    if mode == "best_worst" and k % 2:
        raise ValueError(f"best_worst needs an even k, got {k}")
    if mode in ("random", "extremes_random") and generator is None:
        raise ValueError(f"selection mode {mode!r} needs a torch.Generator")

    chosen: list[np.ndarray] = []
    for prompt in np.unique(prompt_index):
        members = np.flatnonzero(prompt_index == prompt)
        if k > len(members):
            raise ValueError(f"k={k} exceeds the {len(members)} candidates of prompt {prompt}")
        order = _ranked(rewards, members)
        if mode == "best_worst":
            chosen += [order[: k // 2], order[len(order) - k // 2 :]]
        elif mode == "top":
            chosen.append(order[:k])
        elif mode == "random":
            chosen.append(_random_pick(members, k, generator))
        else:  # extremes_random
            q = k // 4
            middle = order[q : len(order) - q]
            chosen += [order[:q], order[len(order) - q :], _random_pick(middle, k - 2 * q, generator)]
    return np.sort(np.concatenate(chosen)).astype(np.int64)
