"""Rewards: images (uint8, B x H x W x 3) and prompts in, one score per image out. See `registry`."""

from solrl_core.rewards.registry import REWARDS, score_images

__all__ = ["REWARDS", "score_images"]
