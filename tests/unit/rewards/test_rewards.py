"""Rewards: the embedded prompt-match reward separates right from wrong prompts; JPEG rewards; the registry."""

import numpy as np
import pytest

from solrl_core.worlds import shapes
from solrl_core.worlds.shapes import COLOURS, SHAPES, Scene, parse_prompt
from solrl_core.errors import SolrlError
from solrl_core.rewards import REWARDS, Reward, score_images
from solrl_core.rewards.registry import clear_reward_cache
from solrl_core.rewards.embedded import prompt_match_reward
from solrl_core.rewards.jpeg import jpeg_compressibility, jpeg_incompressibility

OPPOSITE = {"left": "right", "right": "left", "top": "bottom", "bottom": "top"}


@pytest.fixture(scope="module")
def renders():
    prompts = shapes.all_prompts() * 2
    return shapes.render_batch(prompts, np.random.default_rng(11)), prompts


def _changed(scene: Scene, **change) -> str:
    fields = dict(colour=scene.colour, shape=scene.shape, count=scene.count, position=scene.position)
    fields.update(change)
    return Scene(**fields).prompt


def test_reward_is_high_on_renders_for_their_own_prompts(renders):
    images, prompts = renders
    out = prompt_match_reward(images, prompts)
    assert set(out) == {"reward", "colour", "count", "shape", "position", "background"}
    assert all(v.shape == (len(prompts),) for v in out.values())
    assert np.all((out["reward"] >= 0) & (out["reward"] <= 1))
    assert out["reward"].mean() >= 0.9 and out["reward"].min() >= 0.8


@pytest.mark.parametrize("attribute", ["colour", "shape", "count", "position"])
def test_reward_drops_when_one_attribute_of_the_prompt_is_wrong(renders, attribute):
    images, prompts = renders
    scenes = [parse_prompt(p) for p in prompts]
    colours = list(COLOURS)
    keep = list(range(len(prompts)))
    if attribute == "colour":
        wrong = [_changed(s, colour=colours[(colours.index(s.colour) + 1) % len(colours)]) for s in scenes]
    elif attribute == "shape":
        wrong = [_changed(s, shape=SHAPES[(SHAPES.index(s.shape) + 1) % len(SHAPES)]) for s in scenes]
    elif attribute == "count":
        wrong = [_changed(s, count=3 if s.count == 2 else 2, position=None) for s in scenes]
    else:
        keep = [i for i, s in enumerate(scenes) if s.position]
        wrong = [_changed(scenes[i], position=OPPOSITE[scenes[i].position]) for i in keep]
    right = prompt_match_reward(images[keep], [prompts[i] for i in keep])["reward"]
    bad = prompt_match_reward(images[keep], wrong)["reward"]
    assert np.all(bad < right - 0.3), attribute
    assert bad.mean() < 0.6


def test_reward_degrades_smoothly_with_noise():
    rng = np.random.default_rng(5)
    prompts = ["two red circles", "a blue square on the left", "three green triangles"] * 4
    clean = shapes.render_batch(prompts, rng).astype(np.float32)
    noise = rng.standard_normal(clean.shape).astype(np.float32)
    means = []
    for level in (0, 4, 12, 30, 80):
        noisy = np.clip(clean + level * noise, 0, 255).astype(np.uint8)
        means.append(prompt_match_reward(noisy, prompts)["reward"].mean())
    assert all(a > b for a, b in zip(means, means[1:])), means
    assert means[1] > 0.8 and means[-1] < 0.4, means


def test_reward_of_a_blank_image_is_low():
    blank = np.zeros((2, 32, 32, 3), np.uint8) + np.array(shapes.BACKGROUND, np.uint8)
    assert prompt_match_reward(blank, ["a red circle", "two blue squares"])["reward"].max() < 0.2


def test_jpeg_rewards_order_flat_above_noisy():
    flat = np.full((1, 32, 32, 3), 90, np.uint8)
    noisy = np.random.default_rng(0).integers(0, 256, (1, 32, 32, 3)).astype(np.uint8)
    images = np.concatenate([flat, noisy])
    comp = jpeg_compressibility(images, ["", ""])["reward"]
    incomp = jpeg_incompressibility(images, ["", ""])["reward"]
    assert comp[0] > comp[1] and incomp[0] < incomp[1]
    assert comp[1] < 0 and np.allclose(comp, -incomp)


def test_registry_weighted_sum_and_errors():
    assert {"embedded", "jpeg_compressibility", "jpeg_incompressibility"} <= set(REWARDS)
    prompts = ["a red circle", "two cyan squares"]
    images = shapes.render_batch(prompts, np.random.default_rng(1))
    total, per = score_images(images, prompts, {"embedded": 2.0, "jpeg_compressibility": 0.5})
    assert set(per) == {"embedded", "jpeg_compressibility"}
    assert np.allclose(total, 2.0 * per["embedded"] + 0.5 * per["jpeg_compressibility"])
    with pytest.raises(SolrlError, match="unknown reward 'pickscor'.*embedded.*jpeg_compressibility"):
        score_images(images, prompts, {"pickscor": 1.0})


class _Broken(Reward):
    values = np.array([1.0, np.nan])

    def score_batch(self, images, prompts):
        return self.values


def test_registry_rejects_non_finite_rewards(monkeypatch):
    clear_reward_cache()
    monkeypatch.setitem(REWARDS, "broken", _Broken)
    images = np.zeros((2, 32, 32, 3), np.uint8)
    with pytest.raises(SolrlError, match="reward broken returned non-finite values"):
        score_images(images, ["a red circle"] * 2, {"broken": 1.0})
    monkeypatch.setattr(_Broken, "values", np.array([np.inf, 0.0]))
    with pytest.raises(SolrlError, match="non-finite"):
        score_images(images, ["a red circle"] * 2, {"broken": 1.0})
    clear_reward_cache()
