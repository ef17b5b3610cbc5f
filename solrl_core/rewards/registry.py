"""Named rewards, their model files, and the weighted sum the pipeline trains on.

REWARDS maps each registered name to its `Reward` class (metadata, `resolve`/`load`, batched scoring). Wherever a
registered name is accepted, so is "package.module:Class" naming a `Reward` subclass that lives elsewhere (a
plug-in; `reward_class`; an exception of its code is one line naming it, solrl_core/plugins.py). Rewards load
lazily, once per process and spec (`get_reward`).
Model rewards find their files through the `reward_models:` config section ({name: RewardModelSpec fields}), set
process-wide with `configure_reward_models` or passed to `score_images(..., models=...)`, then the environment
(see `model_files`). Heavy libraries (torch, transformers, open_clip) are imported only when a model reward is loaded.

`score_images` weights each named reward and sums; a weight of 0 scores a reward for evaluation only. Non-finite
scores stop with a SolrlError naming the reward.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.rewards.base import FRAME_KEYS, Reward, RewardModelSpec, check_finite, parse_spec
from solrl_core.rewards.chat_judge import ChatEditJudge, ChatJudge
from solrl_core.plugins import import_plugin, is_plugin, plugin_code
from solrl_core.rewards.clip_rewards import CLIPEdit, CLIPScore, PickScore
from solrl_core.rewards.embedded_edit import EmbeddedEditReward
from solrl_core.rewards.hps import HPSv2
from solrl_core.rewards.imagereward import ImageReward
from solrl_core.rewards.learned import LearnedEmbeddedReward
from solrl_core.rewards.optical_flow import FlowMotion, FlowSmoothness
from solrl_core.rewards.programmatic import (EmbeddedMotionAppearance, EmbeddedMotionMove, EmbeddedMotionReward,
                                             EmbeddedReward, Jpeg, JpegCompressibility, JpegIncompressibility,
                                             TemporalConsistency)

ModelsConfig = Mapping[str, RewardModelSpec | Mapping | None]

REWARDS: dict[str, type[Reward]] = {
    cls.name: cls
    for cls in (PickScore, CLIPScore, HPSv2, ImageReward, Jpeg, JpegCompressibility, JpegIncompressibility, EmbeddedReward,
                LearnedEmbeddedReward, TemporalConsistency, EmbeddedMotionReward, EmbeddedMotionAppearance,
                EmbeddedMotionMove, ChatJudge, EmbeddedEditReward, CLIPEdit, ChatEditJudge, FlowMotion, FlowSmoothness)
}

_configured: dict[str, RewardModelSpec] = {}
_cache: dict[tuple[str, str, str], Reward] = {}
_lock = threading.RLock()


def _unknown(name: str) -> str:
    return f"unknown reward '{name}' (known: {', '.join(sorted(REWARDS))}; or package.module:Class)"


def reward_class(name: str) -> type[Reward]:
    """The `Reward` class of a registered name or of a "package.module:Class" plug-in; SolrlError (one line)
    otherwise."""
    if is_plugin(name):
        return import_plugin(name, Reward, "reward")
    if name not in REWARDS:
        raise SolrlError(_unknown(name))
    return REWARDS[name]


def parse_reward_models(models: ModelsConfig | None) -> dict[str, RewardModelSpec]:
    """Validate a `reward_models:` section: known reward names, and only the keys each reward takes."""
    out: dict[str, RewardModelSpec] = {}
    for name, data in (models or {}).items():
        try:
            cls = reward_class(name)
        except SolrlError as exc:
            raise SolrlError(f"reward_models: {exc}") from None
        out[name] = parse_spec(name, data, cls.spec_keys)
        framed = next((key for key in FRAME_KEYS if getattr(out[name], key) is not None), None)
        if framed and cls.takes_videos:
            raise SolrlError(f"reward_models.{name}.{framed}: {name} scores whole videos, so it picks no frames and "
                             "the setting would do nothing; remove it (it is for image rewards scoring videos)")
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
    return spec if isinstance(spec, RewardModelSpec) else parse_spec(name, spec, reward_class(name).spec_keys)


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
            if spec.url:  # served elsewhere: its files and model are the server's
                from solrl_core.rewards.remote import RemoteReward

                reward = RemoteReward(name, spec)
            else:
                with plugin_code(name, "reward", "load"):  # a plug-in's load (and constructor): one line
                    reward = reward_class(name).load(spec)
            for setting in FRAME_KEYS:  # every reward's, whatever its own load reads
                setattr(reward, setting, getattr(spec, setting))
            _cache[key] = reward
    return reward


def reward_batch_size(name: str, models: ModelsConfig | None = None) -> int:
    """The batch size reward `name` scores with under `models`, without loading it."""
    check_reward_names([name])
    return int(spec_for(name, models).batch_size or reward_class(name).default_batch_size)


def clear_reward_cache() -> None:
    """Forget loaded reward models (frees their memory once nothing else holds them)."""
    with _lock:
        _cache.clear()


def release_rewards(names) -> None:
    """Forget the loaded models of the rewards `names` (under every spec): a reward only the evaluation scores leaves
    the device between evaluations (its memory goes back once nothing else holds it) and loads again at the next."""
    names = set(names)
    with _lock:
        for key in [key for key in _cache if key[0] in names]:
            del _cache[key]


def check_reward_names(names) -> None:
    """SolrlError naming the first name that is neither registered nor an importable plug-in."""
    for name in names:
        reward_class(name)


def preflight_rewards(weights: Mapping[str, float], models: ModelsConfig | None = None) -> None:
    """Before a run: every named reward exists and its files are where the config/environment says (nothing loaded)."""
    if not weights:
        raise SolrlError(f"no reward selected (known: {', '.join(sorted(REWARDS))})")
    check_reward_names(weights)
    for name in weights:
        cls = reward_class(name)
        if cls.needs_weights and not spec_for(name, models).url:  # a served reward's files are the server's
            with plugin_code(name, "reward", "resolve"):
                cls.resolve(spec_for(name, models))


def score_images(
    images: np.ndarray,
    prompts: Sequence[str],
    weights: Mapping[str, float],
    models: ModelsConfig | None = None,
    sources: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Weighted sum of the named rewards (B,), and each named reward's unweighted values (B,).

    models: a `reward_models:` section for this call; None uses `configure_reward_models`'s (then the environment).
    sources: edit prompts' source images (B, sources, H, W, 3), given to the rewards that score edits.
    """
    if not weights:
        raise SolrlError(f"no reward selected (known: {', '.join(sorted(REWARDS))})")
    check_reward_names(weights)
    if models is not None:
        models = parse_reward_models(models)
    images = np.asarray(images)
    per_reward = {}
    for name in weights:
        reward = get_reward(name, models)
        with plugin_code(name, "reward", "scoring"):  # a plug-in's exception: one line naming it
            scored = reward.scores(images, prompts, sources=sources) if reward.edits else reward.scores(images, prompts)
            values = np.asarray(scored, dtype=np.float64)  # sources only to a reward that edits (plug-ins: its own)
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
