"""The embedded video world (solrl_core/worlds/motion.py): its prompts, split, and videos of a shape moving
the named way, and its reward (solrl_core/rewards/embedded_motion.py) against videos that break one part of a prompt."""

import numpy as np
import pytest

from solrl_core.errors import SolrlError
from solrl_core.worlds import motion, shapes
from solrl_core.rewards.embedded import foreground_centroid
from solrl_core.rewards.embedded_motion import motion_match_reward
from solrl_core.rewards.registry import get_reward, score_images


def test_the_grammar_and_its_held_out_combinations():
    prompts = motion.all_prompts()
    assert len(prompts) == len(set(prompts)) == 6 * 3 * 4 and prompts[0] == "a red circle moving left"
    train, test = motion.train_prompts(), motion.test_prompts()
    assert sorted(train + test) == sorted(prompts) and len(test) == 12
    train_words = {w for p in train for w in p.split()}
    assert {w for p in test for w in p.split()} <= train_words  # new combinations of seen words
    for scene in motion.all_scenes():  # every (colour, shape) pair keeps at least 3 of its 4 directions to train on
        kept = [d for d in motion.DIRECTIONS if motion.MotionScene(scene.colour, scene.shape, d).prompt in train]
        assert len(kept) >= 3
    assert motion.parse_prompt("  A Red Circle moving LEFT ").still_prompt == "a red circle"
    with pytest.raises(SolrlError, match="outside the embedded motion grammar"):
        motion.parse_prompt("a red circle on the left")


@pytest.mark.parametrize("prompt", ["a red circle moving left", "a blue square moving up",
                                    "a green triangle moving right", "a cyan circle moving down"])
def test_the_shape_travels_the_named_way_inside_the_frame(prompt):
    video = motion.render_video(prompt, np.random.default_rng(1))
    assert video.shape == (motion.FRAMES, 32, 32, 3) and video.dtype == np.uint8
    centres = np.array([foreground_centroid(frame) for frame in video])
    dx, dy = motion.DIRECTIONS[prompt.split()[-1]]
    steps = np.diff(centres, axis=0)
    np.testing.assert_allclose(steps @ np.array([dx, dy]), motion.TRAVEL * 32 / (motion.FRAMES - 1), atol=0.3)
    np.testing.assert_allclose(steps @ np.array([dy, dx]), 0.0, atol=0.3)  # not across
    edges = np.concatenate([video[:, 0], video[:, -1], video[:, :, 0], video[:, :, -1]], axis=1)
    assert (np.abs(edges.astype(int) - shapes.BACKGROUND) <= 1).all()  # never cut by the frame's edge
    again = motion.render_video(prompt, np.random.default_rng(1))
    assert np.array_equal(video, again)
    with pytest.raises(SolrlError, match="at least 2 frames"):
        motion.render_video(prompt, np.random.default_rng(1), frames=1)


def test_the_reward_scores_the_world_high_and_each_broken_part_low():
    rng = np.random.default_rng(0)
    prompts = motion.train_prompts()[:24]
    videos = motion.render_batch(prompts, rng)
    gold = motion_match_reward(videos, prompts)
    assert gold["reward"].min() > 0.9
    broken = {
        "still": np.repeat(videos[:, :1], motion.FRAMES, axis=1),
        "backwards": videos[:, ::-1],
        "empty": np.broadcast_to(np.array(shapes.BACKGROUND, np.uint8), videos.shape).copy(),
    }
    for name, bad in broken.items():
        scores = motion_match_reward(bad, prompts)
        assert scores["reward"].max() < 0.6, name
    assert motion_match_reward(broken["still"], prompts)["appearance"].min() > 0.9  # it looks right, but stands
    assert (motion_match_reward(broken["backwards"], prompts)["motion"] < 0.05).all()
    other_colour = [p.replace(p.split()[1], "magenta" if p.split()[1] != "magenta" else "red") for p in prompts]
    assert motion_match_reward(videos, other_colour)["reward"].max() < 0.6
    # through the registry: a reward of whole videos, refusing images
    reward = get_reward("embedded_motion")
    assert reward.takes_videos
    total, _ = score_images(videos, prompts, {"embedded_motion": 1.0})
    np.testing.assert_allclose(total, gold["reward"])
    with pytest.raises(SolrlError, match="scores videos"):
        score_images(videos[:, 0], prompts, {"embedded_motion": 1.0})
    with pytest.raises(ValueError, match=r"videos must be \(B, frames >= 2"):
        motion_match_reward(videos[:, :1], prompts)
    # its two parts as rewards of their own, to score beside it at weight 0 (configs/demo_video.yaml's evaluation)
    for name, part in (("embedded_motion_appearance", "appearance"), ("embedded_motion_move", "motion")):
        scores = score_images(broken["still"], prompts, {name: 1.0})[0]
        np.testing.assert_allclose(scores, motion_match_reward(broken["still"], prompts)[part])
