"""Rewards without weights, as `Reward` classes: the embedded prompt-match rewards (images, and videos of moving
shapes), DDPO's JPEG rewards and a video's temporal consistency."""

from __future__ import annotations

import numpy as np

from solrl_core.rewards.base import Reward
from solrl_core.rewards.embedded import prompt_match_reward
from solrl_core.rewards.embedded_motion import motion_match_reward
from solrl_core.rewards.jpeg import jpeg_compressibility, jpeg_incompressibility


class EmbeddedReward(Reward):
    name = "embedded"
    summary = "prompt match in the embedded shapes world (colour, count, shape, position, clean background), in [0, 1]"

    def score_batch(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        return prompt_match_reward(images, prompts)["reward"]


class EmbeddedMotionReward(Reward):
    name = "embedded_motion"
    summary = ("videos of the embedded motion world: prompt match of every frame times the move in the named "
               "direction, in [0, 1]")
    takes_videos = True

    def score_batch(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        return motion_match_reward(images, prompts)["reward"]


class EmbeddedMotionPart(Reward):
    """One part of `embedded_motion` alone (its `part`), to score beside it at weight 0: what of the reward rose."""

    part = ""
    takes_videos = True

    def score_batch(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        return motion_match_reward(images, prompts)[self.part]


class EmbeddedMotionAppearance(EmbeddedMotionPart):
    name = "embedded_motion_appearance"
    part = "appearance"
    summary = "embedded_motion's appearance part: every frame's prompt match (colour, shape), averaged, in [0, 1]"


class EmbeddedMotionMove(EmbeddedMotionPart):
    name = "embedded_motion_move"
    part = "motion"
    summary = ("embedded_motion's motion part: the shape's move from the first frame to the last along the named "
               "direction, exp(-|move / travel - 1| / 0.5), in [0, 1] (standing still 0.14)")


class JpegCompressibility(Reward):
    name = "jpeg_compressibility"
    summary = "minus the JPEG size (quality 95) in kB: smaller files score higher (DDPO)"

    def score_batch(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        return jpeg_compressibility(images, prompts)["reward"]


class Jpeg(JpegCompressibility):
    name = "jpeg"
    summary = "alias of jpeg_compressibility"


class JpegIncompressibility(Reward):
    name = "jpeg_incompressibility"
    summary = "the JPEG size (quality 95) in kB: larger files score higher (DDPO)"

    def score_batch(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        return jpeg_incompressibility(images, prompts)["reward"]


class TemporalConsistency(Reward):
    name = "temporal_consistency"
    summary = ("videos: 1 - the mean absolute change between consecutive frames (of 255), in [0, 1]: still videos "
               "score 1; weigh it beside a prompt reward, alone it rewards a frozen video")
    takes_videos = True

    def score_batch(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        if images.shape[1] < 2:
            return np.ones(len(images))
        change = np.abs(np.diff(images.astype(np.int16), axis=1)).mean(axis=(1, 2, 3, 4))
        return 1.0 - change / 255.0
