"""Rewards: images (uint8, B x H x W x 3) and prompts in, one score per image out. See `registry`."""

from solrl_core.rewards.base import Reward, RewardModelSpec
from solrl_core.rewards.registry import (
    REWARDS,
    configure_reward_models,
    get_reward,
    load_rewards,
    parse_reward_models,
    preflight_rewards,
    reward_class,
    score_images,
    weighted_sum,
)

__all__ = [
    "REWARDS",
    "Reward",
    "RewardModelSpec",
    "configure_reward_models",
    "get_reward",
    "load_rewards",
    "parse_reward_models",
    "preflight_rewards",
    "reward_class",
    "score_images",
    "weighted_sum",
]
