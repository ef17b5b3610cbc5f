"""Group-relative advantages and the optimality weight r of the DiffusionNFT loss."""

from __future__ import annotations

import numpy as np
import torch


STD_SCOPES = ("global", "prompt")


def group_advantages(
    rewards: np.ndarray, prompt_index: np.ndarray, clip: float = 5.0, eps: float = 1e-4, std: str = "global"
) -> np.ndarray:
    """A = (R - mean of R over the same prompt) / (a std of R + eps), clipped to [-clip, clip].

    The std is a population std (ddof=0): `std` "global" = of all rewards of the iteration (NVlabs/Sana sol_rl,
    flow_grpo's `global_std: True`), "prompt" = of the prompt's own rewards (flow_grpo's PerPromptStatTracker with
    `global_std: False`: a group whose rewards are all equal has advantages 0).
    """
    if std not in STD_SCOPES:
        raise ValueError(f"std must be one of {STD_SCOPES}, got {std!r}")
    rewards = np.asarray(rewards, dtype=np.float64)
    prompt_index = np.asarray(prompt_index)
    if rewards.ndim != 1 or prompt_index.shape != rewards.shape:
        raise ValueError(
            f"rewards and prompt_index must be 1-D of equal length, got {rewards.shape} and {prompt_index.shape}"
        )
    if len(rewards) == 0:
        return np.zeros(0)
    centred = np.empty_like(rewards)
    scale = np.full_like(rewards, rewards.std(ddof=0))
    for prompt in np.unique(prompt_index):
        members = prompt_index == prompt
        centred[members] = rewards[members] - rewards[members].mean()
        if std == "prompt":
            scale[members] = rewards[members].std(ddof=0)
    return np.clip(centred / (scale + eps), -clip, clip)


def optimality(adv, clip: float = 5.0):
    """r = clip(0.5 + A / (2 clip), 0, 1): 1 for the best clipped advantage, 0 for the worst, 0.5 for average.

    Accepts a numpy array or a torch tensor and returns the same kind.
    """
    if isinstance(adv, torch.Tensor):
        return torch.clamp(0.5 + adv / (2 * clip), 0.0, 1.0)
    return np.clip(0.5 + np.asarray(adv, dtype=np.float64) / (2 * clip), 0.0, 1.0)
