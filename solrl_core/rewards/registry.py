"""Named rewards and their weighted sum.

Every reward is `fn(images uint8 (B, H, W, 3), prompts) -> dict` with at least "reward" (B,); other keys are its
components, for inspection only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.rewards.embedded import prompt_match_reward
from solrl_core.rewards.jpeg import jpeg_compressibility, jpeg_incompressibility

RewardFn = Callable[[np.ndarray, Sequence[str]], dict[str, np.ndarray]]

REWARDS: dict[str, RewardFn] = {
    "embedded": prompt_match_reward,
    "jpeg_compressibility": jpeg_compressibility,
    "jpeg_incompressibility": jpeg_incompressibility,
}


def check_reward_names(names) -> None:
    unknown = [n for n in names if n not in REWARDS]
    if unknown:
        raise SolrlError(f"unknown reward '{unknown[0]}' (known: {', '.join(sorted(REWARDS))})")


def score_images(
    images: np.ndarray, prompts: Sequence[str], weights: Mapping[str, float]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Weighted sum of the named rewards (B,), and each named reward's unweighted values (B,)."""
    if not weights:
        raise SolrlError(f"no reward selected (known: {', '.join(sorted(REWARDS))})")
    check_reward_names(weights)
    images = np.asarray(images)
    total = np.zeros(len(images), dtype=np.float64)
    per_reward = {}
    for name, weight in weights.items():
        values = np.asarray(REWARDS[name](images, prompts)["reward"], dtype=np.float64)
        if values.shape != (len(images),):
            raise SolrlError(f"reward {name} returned shape {values.shape}, expected ({len(images)},)")
        if not np.all(np.isfinite(values)):
            raise SolrlError(f"reward {name} returned non-finite values")
        per_reward[name] = values
        total += float(weight) * values
    return total, per_reward
