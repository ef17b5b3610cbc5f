"""Prompt sets: builtin, plain text, JSONL with metadata and splits, and one-line errors for bad files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from solrl_core.config.schema import ConfigError
from solrl_core.config.loading import load_config
from solrl_core.worlds import shapes
from solrl_core.errors import SolrlError
from solrl_core.prompts import eval_prompt_set, load_prompt_set, prompt_set, train_prompt_set
from repo_paths import TINY



def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_builtin_sets():
    assert prompt_set("builtin:shapes-train", "k") == shapes.train_prompts()
    assert prompt_set("builtin:shapes-test", "k") == shapes.test_prompts()
    with pytest.raises(SolrlError, match="k: unknown builtin set 'builtin:nope'"):
        prompt_set("builtin:nope", "k")


def test_text_file_skips_blank_lines_and_comments(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("# a comment\n  a red circle  \n\n   \n#another\ntwo blue squares # not a comment\n")
    prompts = load_prompt_set(str(path), "prompts.train")
    assert prompts.prompts == ("a red circle", "two blue squares # not a comment")
    assert prompts.metadata == ({}, {})


def test_jsonl_keeps_metadata_and_selects_splits(tmp_path):
    path = _jsonl(tmp_path / "p.jsonl", [
        {"prompt": "a photo of a cat", "tag": "single_object", "include": [{"class": "cat", "count": 1}],
         "split": "train"},
        "",
        {"prompt": "a photo of two dogs", "tag": "counting", "include": [{"class": "dog", "count": 2}],
         "split": "test"},
        {"prompt": "a red car", "split": "train"},
    ])
    everything = load_prompt_set(str(path), "k")
    assert everything.prompts == ("a photo of a cat", "a photo of two dogs", "a red car")
    assert everything.metadata[1] == {"tag": "counting", "include": [{"class": "dog", "count": 2}], "split": "test"}
    assert prompt_set(str(path), "k", split="train") == ["a photo of a cat", "a red car"]
    assert load_prompt_set(str(path), "k", split="test").metadata[0]["tag"] == "counting"
    with pytest.raises(SolrlError, match=r"k: no prompt of '.*p.jsonl' is in split 'val' \(splits: test, train\)"):
        prompt_set(str(path), "k", split="val")


def test_config_splits_choose_train_and_eval_prompts(tmp_path):
    path = _jsonl(tmp_path / "p.jsonl", [{"prompt": f"prompt {i}", "split": "train" if i % 3 else "test"}
                                         for i in range(12)])
    cfg = load_config(TINY, [f"prompts.train={path}", "prompts.split=train", f"eval.prompts={path}",
                             "eval.split=test", "eval.num_prompts=3"])
    assert train_prompt_set(cfg) == [f"prompt {i}" for i in range(12) if i % 3]
    assert eval_prompt_set(cfg) == ["prompt 0", "prompt 3", "prompt 6"]
    with pytest.raises(ConfigError, match="prompts.split"):
        load_config(TINY, ["prompts.split=[1]"])


def test_a_changed_file_is_read_again(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("one\n")
    assert prompt_set(str(path), "k") == ["one"]
    path.write_text("one\ntwo and more\n")
    assert prompt_set(str(path), "k") == ["one", "two and more"]


@pytest.mark.parametrize("rows,message", [
    (['{"prompt": "fine"}', '{"prompt": "broken"'], r"k: .*p.jsonl line 2 is not valid JSON"),
    (['{"prompt": "fine"}', "", '{"tag": "x"}'], r"k: .*p.jsonl line 3 has no \"prompt\" string"),
    (['{"prompt": ""}'], r"line 1 has no \"prompt\" string"),
    (['["a list"]'], r"line 1 must be a JSON object"),
    ([""], r"k: the prompt list '.*p.jsonl' is empty"),
])
def test_jsonl_errors_name_the_line(tmp_path, rows, message):
    path = _jsonl(tmp_path / "p.jsonl", rows)
    with pytest.raises(SolrlError, match=message) as info:
        prompt_set(str(path), "k")
    assert "\n" not in str(info.value)


def test_file_errors(tmp_path):
    with pytest.raises(SolrlError, match=r"prompts.train: file not found: .*missing.txt"):
        prompt_set(str(tmp_path / "missing.txt"), "prompts.train")
    empty = tmp_path / "empty.txt"
    empty.write_text("# only a comment\n\n")
    with pytest.raises(SolrlError, match="is empty"):
        prompt_set(str(empty), "k")
    text = tmp_path / "p.txt"
    text.write_text("a red circle\n")
    for spec in (str(text), "builtin:shapes-train"):
        with pytest.raises(SolrlError, match=r"split 'train' asked for, but .* has no \"split\" field"):
            prompt_set(spec, "k", split="train")


def test_iteration_prompts_are_drawn_from_the_train_set():
    from solrl_core.stages.draws import iteration_prompts

    cfg = load_config(TINY)
    assert set(iteration_prompts(cfg, 0)) <= set(train_prompt_set(cfg))


def _edit_set(tmp_path: Path, images) -> Path:
    from PIL import Image

    from solrl_core.worlds import edits

    edit = edits.parse_edit("a red circle on the left", "make it blue")
    source, _ = edits.render_pair(edit, np.random.default_rng(0))
    (tmp_path / "sources").mkdir(exist_ok=True)
    Image.fromarray(source).save(tmp_path / "sources" / "red.png")
    return _jsonl(tmp_path / "edits.jsonl", [{"prompt": edit.instruction, "images": images}])


def test_an_edit_line_keeps_its_source_images_checked_and_absolute(tmp_path):
    path = _edit_set(tmp_path, ["sources/red.png", str(tmp_path / "sources" / "red.png")])
    edit_set = load_prompt_set(str(path), "prompts.train")
    assert edit_set.prompts == ("make it blue",)
    assert edit_set.metadata[0]["images"] == [str((tmp_path / "sources" / "red.png").resolve())] * 2
    (tmp_path / "one").mkdir()
    one = load_prompt_set(str(_edit_set(tmp_path / "one", "sources/red.png")), "k")  # one path, not a list
    assert one.metadata[0]["images"] == [str((tmp_path / "one" / "sources" / "red.png").resolve())]


@pytest.mark.parametrize("images, needle", [
    (["sources/missing.png"], r"prompts.train: .*edits.jsonl line 1: source image not found: .*missing.png"),
    (["sources/not-an-image.png"], r"line 1: source image .*not-an-image.png is not an image Pillow reads"),
    ([], r"line 1: \"images\" must be an image path or a non-empty list of them"),
    ([3], r"line 1: \"images\" must be an image path"),
])
def test_a_bad_source_image_is_one_line_naming_the_file_and_line(tmp_path, images, needle):
    path = _edit_set(tmp_path, images)
    (tmp_path / "sources" / "not-an-image.png").write_text("a red circle\n")
    with pytest.raises(SolrlError, match=needle):
        load_prompt_set(str(path), "prompts.train")


def test_an_edit_set_gives_every_line_its_sources(tmp_path):
    path = _edit_set(tmp_path, "sources/red.png")
    assert load_prompt_set(str(path), "prompts.train").sources == ((str((tmp_path / "sources" / "red.png").resolve()),),)
    with path.open("a") as f:
        f.write(json.dumps({"prompt": "make it blue"}) + "\n")
    with pytest.raises(SolrlError, match=r"line 2 has no \"images\" but line 1 has: an edit prompt set gives every"):
        load_prompt_set(str(path), "prompts.train")
    assert load_prompt_set(str(_jsonl(tmp_path / "plain.jsonl", [{"prompt": "a"}])), "prompts.train").sources is None
