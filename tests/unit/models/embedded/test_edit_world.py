"""The embedded editing world (solrl_core/worlds/edits.py) and its reward (solrl_core/rewards/embedded_edit.py): the
instruction grammar, the held-out split, the paired renders (a colour or shape edit keeps the source's layout pixel
for pixel outside the object) and the edit reward (the edit's answer scores high, the source left unchanged or
another edit's answer low)."""

from __future__ import annotations

import numpy as np
import pytest

from solrl_core.errors import SolrlError
from solrl_core.rewards import embedded_edit
from solrl_core.rewards.embedded import prompt_match_reward
from solrl_core.worlds import edits, shapes
from solrl_core.worlds.shapes import Scene


def test_every_edit_is_read_back_from_its_source_and_instruction():
    every = edits.all_edits()
    assert {edit.kind for edit in every} == set(edits.KINDS)
    for edit in every:
        assert edits.parse_edit(edit.source.prompt, edit.instruction.upper()) == edit
        assert edit.target != edit.source and edit.target.prompt in shapes.all_prompts()
    per_source = {}
    for edit in every:
        per_source.setdefault(edit.source, []).append(edit.instruction)
    assert all(len(set(v)) == len(v) for v in per_source.values())  # one edit per instruction of a source


def test_the_held_out_edits_are_a_fifth_spread_over_every_kind():
    test, train = edits.test_edits(), edits.train_edits()
    assert not set(test) & set(train) and len(test) + len(train) == len(edits.all_edits())
    assert 0.15 < len(test) / len(edits.all_edits()) < 0.25
    assert {edit.kind for edit in test} == set(edits.KINDS)


@pytest.mark.parametrize("source, instruction, target", [
    ("a red circle", "make it blue", "a blue circle"),
    ("two red circles", "make them green", "two green circles"),
    ("three blue squares", "turn them into triangles", "three blue triangles"),
    ("a yellow triangle on the left", "make it two", "two yellow triangles"),
    ("a cyan square at the top", "move it to the bottom", "a cyan square at the bottom"),
])
def test_an_instruction_asks_for_its_target_scene(source, instruction, target):
    assert edits.parse_edit(source, instruction).target.prompt == target


@pytest.mark.parametrize("source, instruction, needle", [
    ("a red circle", "make it red", "is not an edit of 'a red circle'"),
    ("a red circle", "move it to the left", "is not an edit"),  # placed anywhere: it may be on the left already
    ("a red circle on the left", "move it to the top", "is not an edit"),  # only the opposite edge
    ("a purple circle", "make it blue", "outside the embedded grammar"),
])
def test_an_instruction_outside_the_world_is_one_line(source, instruction, needle):
    with pytest.raises(SolrlError, match=needle):
        edits.parse_edit(source, instruction)


def test_an_edit_that_changes_nothing_is_refused():
    with pytest.raises(SolrlError, match="changes nothing"):
        edits.Edit(Scene("red", "circle", 1), "colour", "red")


def test_a_colour_or_shape_edit_keeps_the_layout_and_the_generator_moves_on_as_for_the_source():
    edit = edits.parse_edit("two red squares", "make them blue")
    rng = np.random.default_rng(3)
    source, target = edits.render_pair(edit, rng)
    alone = np.random.default_rng(3)
    assert np.array_equal(source, shapes.render_scene(edit.source, alone))
    assert rng.bit_generator.state == alone.bit_generator.state  # the next draw is the source's next
    background = np.all(source == shapes.BACKGROUND, axis=-1)
    assert np.array_equal(background, np.all(target == shapes.BACKGROUND, axis=-1))  # the same pixels covered
    assert not np.array_equal(source, target)
    shape_edit = edits.parse_edit("a green square at the top", "turn it into a circle")
    s, t = edits.render_pair(shape_edit, np.random.default_rng(4))
    assert embedded_edit.layout_kept(s, t) > 0.8 and prompt_match_reward(t[None], ["a green circle at the top"])["reward"] > 0.8


def test_the_edit_reward_ranks_the_answer_above_the_unchanged_source_and_other_answers():
    rng = np.random.default_rng(0)
    pick = np.random.default_rng(1).choice(len(edits.all_edits()), 120, replace=False)
    sample = [edits.all_edits()[i] for i in pick]
    sources, targets = edits.render_pairs(sample, rng)
    answer = embedded_edit.edit_match_reward(sources, targets, sample)
    unchanged = embedded_edit.edit_match_reward(sources, sources, sample)
    assert answer["reward"].min() > 0.8 and np.all(answer["reward"] > unchanged["reward"] + 0.2)
    assert set(answer) == {"reward", "follow", "layout"}
    assert all(np.all((v >= 0) & (v <= 1)) for v in answer.values())
    # the answer to another edit of the same source (a shape edit's image for a colour edit)
    colour = edits.parse_edit("a red square on the left", "make it blue")
    shape = edits.parse_edit("a red square on the left", "turn it into a circle")
    s, wrong = edits.render_pair(shape, np.random.default_rng(5))
    _, right = edits.render_pair(colour, np.random.default_rng(5))
    scores = embedded_edit.edit_match_reward(np.stack([s, s]), np.stack([right, wrong]), [colour, colour])["reward"]
    assert scores[0] > 0.9 > 0.3 > scores[1]
    # a position edit's answer left where it was: its object is at the edge it was asked to leave
    moved = edits.parse_edit("a blue circle on the right", "move it to the left")
    s, t = edits.render_pair(moved, np.random.default_rng(6))
    assert embedded_edit.edit_match_reward(s[None], s[None], [moved])["layout"][0] < 0.05 < 0.95 < \
        embedded_edit.edit_match_reward(s[None], t[None], [moved])["layout"][0]


def test_the_edit_reward_needs_one_source_and_edit_per_image():
    edit = edits.parse_edit("a red circle", "make it blue")
    s, t = edits.render_pair(edit, np.random.default_rng(0))
    with pytest.raises(ValueError, match="2 sources, 1 edited images and 1 edits"):
        embedded_edit.edit_match_reward(np.stack([s, s]), t[None], [edit])


def test_an_edit_prompt_names_its_scene_then_its_instruction_and_reads_back():
    assert all(edits.edit_of_prompt(edit.prompt) == edit for edit in edits.all_edits())
    edit = edits.parse_edit("a red circle on the left", "move it to the right")
    assert edit.prompt == "a red circle on the left: move it to the right"
    with pytest.raises(SolrlError, match="is not an edit prompt of the embedded editing world"):
        edits.edit_of_prompt("make it blue")


def test_the_worlds_prompt_sets_name_each_edits_source_drawn_once_alike(tmp_path, monkeypatch):
    from PIL import Image

    from solrl_core.prompts import load_prompt_set

    for folder in ("a", "b"):
        monkeypatch.setenv(edits.CACHE_ENV, str(tmp_path / folder))
        held_out = load_prompt_set("builtin:edits-test", f"eval.prompts {folder}")
        assert held_out.prompts == tuple(edit.prompt for edit in edits.test_edits())
        assert all(path.startswith(str(tmp_path / folder)) for (path,) in held_out.sources)
    a, b = ([np.asarray(Image.open(path)) for (path,) in load_prompt_set("builtin:edits-test", key).sources[:20]]
            for key in ("eval.prompts a", "eval.prompts b"))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))  # another machine draws the same sources
    for edit, image in zip(edits.test_edits()[:20], a):  # each the source of its edit: the instruction not yet done
        assert prompt_match_reward(image[None], [edit.source.prompt])["reward"][0] > 0.8


def test_the_editing_demo_evaluates_every_held_out_edit_of_every_kind(tmp_path, monkeypatch):
    """configs/demo_edit.yaml's held-out score is over the whole held-out set: its first 26 edits (the image demo's
    eval.num_prompts) are colour, shape and count edits of red circles and squares, without a position edit, and
    disagreed with the whole set on whether Sol-RL helped (docs/lab/editing-2026-11-30.md)."""
    from repo_paths import ROOT
    from solrl_core.config.loading import load_config
    from solrl_core.prompts import eval_prompt_set

    monkeypatch.setenv(edits.CACHE_ENV, str(tmp_path))
    cfg = load_config(ROOT / "configs" / "demo_edit.yaml")
    held_out = [edit.prompt for edit in edits.test_edits()]
    assert list(eval_prompt_set(cfg)) == held_out
    assert {edits.edit_of_prompt(p).kind for p in eval_prompt_set(cfg)} == set(edits.KINDS)
    assert "position" not in {edit.kind for edit in edits.test_edits()[:26]}
    assert cfg.eval.num_prompts * cfg.eval.seeds_per_prompt >= 400  # the whole set, not 104 samples of a corner
