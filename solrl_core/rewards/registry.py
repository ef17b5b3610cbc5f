"""Named rewards, their model files, and the weighted sum the pipeline trains on.

Two views of the same rewards:
  REWARD_CLASSES  name -> `Reward` class (metadata, `resolve`/`load`, batched `__call__` -> np.ndarray)
  REWARDS         name -> fn(images uint8 (B, H, W, 3), prompts) -> dict with at least "reward" (B,); other keys
                  are components, for inspection only. Model rewards load lazily, once per process and spec.
Model rewards find their files through the `reward_models:` config section ({name: RewardModelSpec fields}), set
process-wide with `configure_reward_models` or passed to `score_images(..., models=...)`, then the environment
(see `loading`). Heavy libraries (torch, transformers, open_clip) are imported only when a model reward is loaded.

`score_images` weights each named reward and sums; a weight of 0 scores a reward for evaluation only. Non-finite
scores stop with a SolrlError naming the reward.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.rewards.base import Reward, RewardModelSpec, check_finite, parse_spec
from solrl_core.rewards.clip_rewards import CLIPScore, PickScore
from solrl_core.rewards.embedded import prompt_match_reward
from solrl_core.rewards.hps import HPSv2
from solrl_core.rewards.imagereward import ImageReward
from solrl_core.rewards.jpeg import jpeg_compressibility, jpeg_incompressibility
from solrl_core.rewards.programmatic import EmbeddedReward, Jpeg, JpegCompressibility, JpegIncompressibility

RewardFn = Callable[[np.ndarray, Sequence[str]], dict[str, np.ndarray]]
ModelsConfig = Mapping[str, RewardModelSpec | Mapping | None]

REWARD_CLASSES: dict[str, type[Reward]] = {
    cls.name: cls
    for cls in (PickScore, CLIPScore, HPSv2, ImageReward, Jpeg, JpegCompressibility, JpegIncompressibility, EmbeddedReward)
}

_configured: dict[str, RewardModelSpec] = {}
_cache: dict[tuple[str, str, str], Reward] = {}
_lock = threading.RLock()


def parse_reward_models(models: ModelsConfig | None) -> dict[str, RewardModelSpec]:
    """Validate a `reward_models:` section: known reward names, and only the keys each reward takes."""
    out: dict[str, RewardModelSpec] = {}
    for name, data in (models or {}).items():
        if name not in REWARD_CLASSES:
            raise SolrlError(f"reward_models: unknown reward '{name}' (known: {', '.join(sorted(REWARD_CLASSES))})")
        out[name] = parse_spec(name, data, REWARD_CLASSES[name].spec_keys)
    return out


def configure_reward_models(models: ModelsConfig | None) -> dict[str, RewardModelSpec]:
    """Set the process-wide `reward_models:` section used when `score_images` gets no `models`."""
    global _configured
    specs = parse_reward_models(models)
    with _lock:
        _configured = specs
    return specs


def spec_for(name: str, models: ModelsConfig | None = None) -> RewardModelSpec:
    specs = parse_reward_models(models) if models is not None else _configured
    spec = specs.get(name)
    if spec is None:
        return RewardModelSpec()
    return spec if isinstance(spec, RewardModelSpec) else parse_spec(name, spec, REWARD_CLASSES[name].spec_keys)


def get_reward(name: str, models: ModelsConfig | None = None) -> Reward:
    """The loaded reward `name` for its spec (cached: each model loads once per process and spec)."""
    check_reward_names([name])
    spec = spec_for(name, models)
    # the files come from the spec and the SOLRL_* environment: both are part of the key
    env = repr(sorted((k, v) for k, v in os.environ.items() if k.startswith("SOLRL_")))
    key = (name, spec.model_dump_json(), env)
    with _lock:
        reward = _cache.get(key)
        if reward is None:
            reward = REWARD_CLASSES[name].load(spec)
            _cache[key] = reward
    return reward


def reward_batch_size(name: str, models: ModelsConfig | None = None) -> int:
    """The batch size reward `name` scores with under `models`, without loading it."""
    check_reward_names([name])
    return int(spec_for(name, models).batch_size or REWARD_CLASSES[name].default_batch_size)


def clear_reward_cache() -> None:
    """Forget loaded reward models (frees their memory once nothing else holds them)."""
    with _lock:
        _cache.clear()


class ModelRewardFn:
    """REWARDS entry of a model reward: loads it on first use, returns {"reward": scores}."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, images, prompts, models: ModelsConfig | None = None) -> dict[str, np.ndarray]:
        return {"reward": get_reward(self.name, models)(images, prompts)}

    def __repr__(self) -> str:
        return f"ModelRewardFn({self.name!r})"


REWARDS: dict[str, RewardFn] = {
    "embedded": prompt_match_reward,
    "jpeg": jpeg_compressibility,
    "jpeg_compressibility": jpeg_compressibility,
    "jpeg_incompressibility": jpeg_incompressibility,
    **{name: ModelRewardFn(name) for name, cls in REWARD_CLASSES.items() if cls.needs_weights},
}


def check_reward_names(names) -> None:
    unknown = [n for n in names if n not in REWARDS]
    if unknown:
        raise SolrlError(f"unknown reward '{unknown[0]}' (known: {', '.join(sorted(REWARDS))})")


def preflight_rewards(weights: Mapping[str, float], models: ModelsConfig | None = None) -> None:
    """Before a run: every named reward exists and its files are where the config/environment says (nothing loaded)."""
    if not weights:
        raise SolrlError(f"no reward selected (known: {', '.join(sorted(REWARDS))})")
    check_reward_names(weights)
    for name in weights:
        cls = REWARD_CLASSES.get(name)
        if cls is not None and cls.needs_weights:
            cls.resolve(spec_for(name, models))


def score_images(
    images: np.ndarray,
    prompts: Sequence[str],
    weights: Mapping[str, float],
    models: ModelsConfig | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Weighted sum of the named rewards (B,), and each named reward's unweighted values (B,).

    models: a `reward_models:` section for this call; None uses `configure_reward_models`'s (then the environment).
    """
    if not weights:
        raise SolrlError(f"no reward selected (known: {', '.join(sorted(REWARDS))})")
    check_reward_names(weights)
    if models is not None:
        models = parse_reward_models(models)
    images = np.asarray(images)
    per_reward = {}
    for name in weights:
        fn = REWARDS[name]
        out = fn(images, prompts, models=models) if isinstance(fn, ModelRewardFn) else fn(images, prompts)
        values = np.asarray(out["reward"], dtype=np.float64)
        if values.shape != (len(images),):
            raise SolrlError(f"reward {name} returned shape {values.shape}, expected ({len(images)},)")
        check_finite(name, values, prompts)
        per_reward[name] = values
    return weighted_sum(per_reward, weights), per_reward


def weighted_sum(per_reward: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> np.ndarray:
    """sum of weight * values (float64), added in the order of `weights` (the order fixes the rounding)."""
    total = np.zeros(len(next(iter(per_reward.values()))), dtype=np.float64)
    for name, weight in weights.items():
        total += float(weight) * np.asarray(per_reward[name], dtype=np.float64)
    return total


def load_rewards(weights: Mapping[str, float], models: ModelsConfig | None = None) -> dict[str, Reward]:
    """The loaded `Reward` of every named reward (files are resolved and models loaded now, once per process)."""
    if not weights:
        raise SolrlError(f"no reward selected (known: {', '.join(sorted(REWARDS))})")
    check_reward_names(weights)
    return {name: get_reward(name, models) for name in weights}
