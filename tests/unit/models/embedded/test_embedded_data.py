"""The shapes world: grammar round-trip, split, deterministic anti-aliased rendering with the right content."""

import numpy as np
import pytest
from scipy import ndimage

from solrl_core.worlds import shapes
from solrl_core.worlds.shapes import COLOURS, POSITIONS, SHAPES, Scene, parse_prompt, render_scene
from solrl_core.errors import SolrlError


def test_every_scene_round_trips_through_its_prompt():
    scenes = shapes.all_scenes()
    assert len(scenes) == len(set(scenes)) == 6 * 3 * (1 + len(POSITIONS) + 2)
    for scene in scenes:
        assert parse_prompt(scene.prompt) == scene
    assert parse_prompt("  Two BLUE   squares ") == Scene("blue", "square", 2)
    assert shapes.make_prompt("red", "circle", 1, "left") == "a red circle on the left"
    assert shapes.make_prompt("yellow", "triangle", 3) == "three yellow triangles"


@pytest.mark.parametrize(
    "prompt", ["a red circles", "two red circle", "a purple circle", "two red circles on the left", "", "a red circle up"]
)
def test_prompts_outside_the_grammar_are_user_errors(prompt):
    with pytest.raises(SolrlError, match="outside the embedded grammar"):
        parse_prompt(prompt)


def test_split_is_deterministic_disjoint_and_covers_every_attribute():
    train, test = shapes.train_prompts(), shapes.test_prompts()
    assert train == shapes.train_prompts() and test == shapes.test_prompts()
    assert not set(train) & set(test)
    assert sorted(train + test) == sorted(shapes.all_prompts())
    assert 0.15 <= len(test) / len(shapes.all_prompts()) <= 0.25
    train_scenes = [parse_prompt(p) for p in train]
    assert {s.colour for s in train_scenes} == set(COLOURS)
    assert {s.shape for s in train_scenes} == set(SHAPES)
    assert {s.position for s in train_scenes} == {None, *POSITIONS}
    assert {s.count for s in train_scenes} == {1, 2, 3}
    assert set(shapes.vocabulary()) == {w for p in shapes.all_prompts() for w in p.split()}


def test_rendering_is_deterministic_given_the_generator():
    a = shapes.render_batch(shapes.all_prompts()[:20], np.random.default_rng(7))
    b = shapes.render_batch(shapes.all_prompts()[:20], np.random.default_rng(7))
    c = shapes.render_batch(shapes.all_prompts()[:20], np.random.default_rng(8))
    assert a.dtype == np.uint8 and a.shape == (20, 32, 32, 3)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert render_scene("a red square", np.random.default_rng(0), resolution=48).shape == (48, 48, 3)


def test_renders_show_the_right_count_colour_and_position():
    rng = np.random.default_rng(3)
    for scene in shapes.all_scenes():
        image = render_scene(scene, rng)
        bright = image.max(axis=-1) > 128
        labels, n = ndimage.label(bright, structure=np.ones((3, 3)))
        assert n == scene.count, scene.prompt
        mean = image[bright].mean(axis=0)
        nearest = min(COLOURS, key=lambda c: np.abs(np.array(COLOURS[c]) - mean).sum())
        assert nearest == scene.colour, scene.prompt
        # the background stays plain
        assert np.all(image[~ndimage.binary_dilation(bright, iterations=2)] == shapes.BACKGROUND)
        if scene.position:
            ys, xs = np.nonzero(bright)
            centre = {"left": xs.mean(), "right": 31 - xs.mean(), "top": ys.mean(), "bottom": 31 - ys.mean()}
            assert centre[scene.position] < 16, scene.prompt


def test_rendering_is_anti_aliased_and_shapes_differ():
    rng = np.random.default_rng(4)
    fills = {}
    for shape in SHAPES:
        image = render_scene(Scene("green", shape, 1), rng, resolution=64)
        level = image[..., 1]
        if shape == "circle":  # a curved edge always crosses pixels partially: intermediate values, not 2 levels
            assert len(np.unique(level)) > 5
        mask = level > 110
        ys, xs = np.nonzero(mask)
        fills[shape] = mask.sum() / ((np.ptp(ys) + 1) * (np.ptp(xs) + 1))
    assert fills["square"] > 0.93 and 0.7 < fills["circle"] < 0.86 and 0.4 < fills["triangle"] < 0.65
