"""Programmatic reward of the embedded video world (solrl_core/worlds/motion.py): no weights, in [0, 1].

Per video, for a prompt "a red circle moving left":
  appearance  the image world's prompt match (solrl_core/rewards/embedded.py) of every frame for "a red circle"
              (colour, count, shape, clean background), averaged over the frames
  motion      how far the foreground's centroid moves from the first frame to the last along the named direction, as
              a fraction of the world's travel (motion.TRAVEL of the side): exp(-|moved / travel - 1| / 0.5), so the
              right move scores 1, standing still 0.14 and the opposite move 0.02
reward = the weighted geometric mean of the two (each floored as the image reward floors its components), so a still
video of the right shape and one that moves the right way in the wrong colour both score low.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solrl_core.worlds import motion
from solrl_core.rewards.embedded import FLOOR, foreground_centroid, prompt_match_reward

WEIGHTS = {"appearance": 0.6, "motion": 0.4}
MOTION_SCALE = 0.5


def _moved(video: np.ndarray, direction: str) -> float | None:
    """The centroid's move from the first frame to the last along `direction`, in units of the world's travel; None
    when the first or the last frame shows nothing."""
    first, last = foreground_centroid(video[0]), foreground_centroid(video[-1])
    if first is None or last is None:
        return None
    dx, dy = motion.DIRECTIONS[direction]
    travel = motion.TRAVEL * video.shape[2]
    return float(((last[0] - first[0]) * dx + (last[1] - first[1]) * dy) / travel)


def motion_match_reward(videos: np.ndarray, prompts: Sequence[str]) -> dict[str, np.ndarray]:
    """Reward of uint8 videos (B, frames, H, W, 3) for their motion prompts: {"reward", "appearance", "motion"}, each
    (B,)."""
    videos = np.asarray(videos)
    if videos.ndim != 5 or videos.shape[-1] != 3 or videos.shape[1] < 2:
        raise ValueError(f"videos must be (B, frames >= 2, H, W, 3), got {videos.shape}")
    if len(prompts) != len(videos):
        raise ValueError(f"{len(videos)} videos but {len(prompts)} prompts")
    scenes = [motion.parse_prompt(p) for p in prompts]
    frames = videos.shape[1]
    stills = [s.still_prompt for s in scenes for _ in range(frames)]
    appearance = prompt_match_reward(videos.reshape(-1, *videos.shape[2:]), stills)["reward"].reshape(-1, frames)
    out = {"appearance": appearance.mean(axis=1), "motion": np.zeros(len(videos))}
    for i, (video, scene) in enumerate(zip(videos, scenes)):
        moved = _moved(video, scene.direction)
        out["motion"][i] = 0.0 if moved is None else np.exp(-abs(moved - 1.0) / MOTION_SCALE)
    log_reward = sum(w * np.log(np.maximum(out[k], FLOOR)) for k, w in WEIGHTS.items()) / sum(WEIGHTS.values())
    return {"reward": np.exp(log_reward), **out}
