"""Rewards of videos (B, frames, H, W, 3): an image reward scores evenly spaced frames for the video's prompt and
averages them or takes the worst (`reward_models.<name>.video_frames`, `.video_aggregate`); temporal_consistency
scores the video itself (the optical-flow rewards: test_optical_flow_rewards.py)."""

import json

import numpy as np
import pytest

from solrl_core.errors import SolrlError
from solrl_core.rewards.jpeg import jpeg_size_kb
from solrl_core.rewards.registry import get_reward, score_images


def _videos(n=3, frames=5, seed=0):
    rng = np.random.default_rng(seed)
    videos = rng.integers(0, 256, (n, frames, 16, 16, 3), dtype=np.uint8)
    videos[:, :, :8] = 40  # the frames differ in how much is flat: JPEG sizes differ per frame
    return videos


def test_an_image_reward_averages_its_scores_of_the_chosen_frames():
    videos = _videos()
    prompts = ["a cat", "a dog", "a car"]
    total, parts = score_images(videos, prompts, {"jpeg": 1.0})
    every = -np.stack([jpeg_size_kb(videos[:, t]) for t in range(5)], axis=1).mean(axis=1)
    np.testing.assert_allclose(parts["jpeg"], every)
    np.testing.assert_allclose(total, every)
    ends, _ = score_images(videos, prompts, {"jpeg": 1.0}, {"jpeg": {"video_frames": 2}})  # the first and the last
    np.testing.assert_allclose(ends, -(jpeg_size_kb(videos[:, 0]) + jpeg_size_kb(videos[:, 4])) / 2)
    three, _ = score_images(videos, prompts, {"jpeg": 1.0}, {"jpeg": {"video_frames": 3}})  # frames 0, 2, 4
    np.testing.assert_allclose(three, -np.mean([jpeg_size_kb(videos[:, t]) for t in (0, 2, 4)], axis=0))


def test_an_image_reward_can_take_its_worst_frame():
    videos = _videos()
    per_frame = -np.stack([jpeg_size_kb(videos[:, t]) for t in range(5)], axis=1)
    worst, _ = score_images(videos, ["a", "b", "c"], {"jpeg": 1.0}, {"jpeg": {"video_aggregate": "min"}})
    np.testing.assert_allclose(worst, per_frame.min(axis=1))
    assert (worst < per_frame.mean(axis=1)).all()
    ends, _ = score_images(videos, ["a", "b", "c"], {"jpeg": 1.0},
                           {"jpeg": {"video_aggregate": "min", "video_frames": 2}})  # the worse of the first and last
    np.testing.assert_allclose(ends, per_frame[:, [0, 4]].min(axis=1))
    first, _ = score_images(videos, ["a", "b", "c"], {"jpeg": 1.0}, {"jpeg": {"video_frames": 1}})
    np.testing.assert_allclose(first, per_frame[:, 0])  # the first frame alone
    assert json.loads(get_reward("jpeg", {"jpeg": {"video_aggregate": "min"}}).fingerprint())["video_aggregate"] == "min"
    with pytest.raises(SolrlError, match="video_aggregate"):
        score_images(videos, ["a", "b", "c"], {"jpeg": 1.0}, {"jpeg": {"video_aggregate": "median"}})
    with pytest.raises(SolrlError, match="reward_models.temporal_consistency.video_aggregate: temporal_consistency "
                                         "scores whole videos"):
        score_images(videos, ["a", "b", "c"], {"temporal_consistency": 1.0},
                     {"temporal_consistency": {"video_aggregate": "min"}})


def test_temporal_consistency_scores_the_frame_to_frame_change():
    videos = _videos()
    videos[1] = videos[1, :1]  # a still video: every frame the first
    _, parts = score_images(videos, ["a", "b", "c"], {"temporal_consistency": 1.0})
    change = np.abs(np.diff(videos.astype(np.float64), axis=1)).mean(axis=(1, 2, 3, 4))
    np.testing.assert_allclose(parts["temporal_consistency"], 1 - change / 255)
    assert parts["temporal_consistency"][1] == 1.0 and (parts["temporal_consistency"][[0, 2]] < 0.9).all()
    with pytest.raises(SolrlError, match="temporal_consistency scores videos; the model makes images"):
        score_images(videos[:, 0], ["a", "b", "c"], {"temporal_consistency": 1.0})


def test_the_frames_setting_is_checked_and_part_of_the_fingerprint():
    plain = json.loads(get_reward("jpeg").fingerprint())
    assert not {"video_frames", "video_aggregate"} & set(plain)  # the scores of earlier runs keep their fingerprint
    assert json.loads(get_reward("jpeg", {"jpeg": {"video_frames": 2}}).fingerprint())["video_frames"] == 2
    with pytest.raises(SolrlError, match="video_frames"):
        score_images(_videos(), ["a", "b", "c"], {"jpeg": 1.0}, {"jpeg": {"video_frames": 0}})
