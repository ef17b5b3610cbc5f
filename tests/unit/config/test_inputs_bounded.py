"""Inputs a user gives are read with bounded work and refused in one line when they are not what solrl reads: config
and prompt files that are not regular files (a FIFO would block the read forever), YAML alias bombs, a config that
sets nothing, huge values quoted in messages, reward-model batch sizes, more prompts per iteration than the set has
(checked by the draw itself, for a stage run on its own)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from solrl_core.config.schema import MAX_BATCH, MAX_YAML_VALUES, _expanded_size, load_yaml
from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.excerpts import EXCERPT_CHARS, LINE_CHARS
from solrl_core.prompts import load_prompt_set
from solrl_core.seeds import derived_generator
from solrl_core.stages.draws import PURPOSE_PROMPTS, iteration_prompts
from repo_paths import TINY

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


def _outcome_within(call, seconds: float = 10.0, unblock: Path | None = None) -> BaseException | None:
    """The exception `call()` raised (None if it returned), failing the test if it is still running after `seconds`
    (then a writer opened on the FIFO `unblock` lets a blocked reader finish, so no thread stays behind)."""
    outcome: dict = {}

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if unblock is not None:
            os.close(os.open(unblock, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"still running after {seconds} s: the read blocked")
    return outcome.get("error")


def _one_line(exc: BaseException) -> str:
    message = str(exc)
    assert "\n" not in message and len(message) <= LINE_CHARS, message[:300]
    return message


# ---- files that are not regular files ----------------------------------------------------------------------------

@needs_fifo
def test_a_fifo_given_as_config_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    error = _outcome_within(lambda: load_config(fifo), unblock=fifo)
    assert isinstance(error, ConfigError)
    assert _one_line(error) == f"config: {fifo} is a FIFO, not a regular file; give a file"


@needs_fifo
def test_a_fifo_named_by_extends_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "base.yaml"
    os.mkfifo(fifo)
    config = tmp_path / "run.yaml"
    config.write_text("extends: base.yaml\niterations: 1\n")
    error = _outcome_within(lambda: load_config(config), unblock=fifo)
    assert isinstance(error, ConfigError)
    assert str(fifo) in _one_line(error) and "is a FIFO" in str(error)


@needs_fifo
@pytest.mark.parametrize("name", ["prompts.txt", "prompts.jsonl"])
def test_a_fifo_given_as_prompt_file_is_refused_without_blocking(tmp_path, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    error = _outcome_within(lambda: load_prompt_set(str(fifo), "prompts.train"), unblock=fifo)
    assert isinstance(error, SolrlError)
    assert _one_line(error) == f"prompts.train: {fifo} is a FIFO, not a regular file; give a file"


def test_regular_files_read_as_before(tmp_path):
    """Through the same reader: CRLF line ends read as in text mode, a directory is still refused."""
    prompts = tmp_path / "p.txt"
    prompts.write_bytes(b"a red circle\r\ntwo blue squares\r\n")
    assert load_prompt_set(str(prompts), "prompts.train").prompts == ("a red circle", "two blue squares")
    config = tmp_path / "c.yaml"
    config.write_bytes(f"extends: {TINY}\r\niterations: 3\r\n".encode())
    assert load_config(config).iterations == 3
    with pytest.raises(ConfigError, match=r"is a directory; give a file$"):
        load_config(tmp_path)


# ---- YAML aliases ----------------------------------------------------------------------------------------------------

BILLION_LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi"))


def test_a_billion_laughs_is_refused_before_it_expands(tmp_path):
    assert len(BILLION_LAUGHS.encode()) <= 362  # the classic bomb: 9 levels of 9 aliases, 9^9 "lol"s
    path = tmp_path / "bomb.yaml"
    path.write_text(BILLION_LAUGHS)
    start = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert time.perf_counter() - start < 5  # expanding it would take minutes and gigabytes; refusing takes ~1 ms
    assert _one_line(info.value) == (
        f"{path.resolve()}: its aliases (*name) expand to more than {MAX_YAML_VALUES:,} values (an alias bomb, or an "
        "alias inside its own anchor); write the values out, or repeat fewer")


def test_the_expanded_size_counts_each_alias_as_its_whole_value():
    def size(text: str) -> int:
        return _expanded_size(yaml.compose(text, Loader=yaml.SafeLoader), limit=10**9)

    # mapping 1 + keys a, b 2 + [1, 2, 3] 4 + [*a, *a] 1 + 2 x 4
    assert size("a: &a [1, 2, 3]\nb: [*a, *a]\n") == 1 + 2 + 4 + 1 + 2 * 4
    sides = [1 + 9]  # a: ["lol" x 9]; then each list holds 9 of the previous one
    for _ in range(8):
        sides.append(1 + 9 * sides[-1])
    assert size(BILLION_LAUGHS) == 1 + 9 + sum(sides)  # the mapping, its 9 keys, its 9 lists expanded
    assert _expanded_size(yaml.compose(BILLION_LAUGHS, Loader=yaml.SafeLoader), limit=1000) > 1000  # stops early


def test_a_recursive_alias_is_refused():
    with pytest.raises(ConfigError, match="an alias inside its own anchor"):
        load_yaml("a: &a [1, *a]\n", "x.yaml")


def test_aliases_within_the_limit_load_as_written_out(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"extends: {TINY}\nexplore: &same {{steps: 5, batch_size: 2}}\neval: *same\n")
    assert load_yaml("a: &x {k: [1, 2]}\nb: *x\n") == {"a": {"k": [1, 2]}, "b": {"k": [1, 2]}}
    cfg = load_config(path)
    assert (cfg.explore.steps, cfg.explore.batch_size, cfg.eval.steps, cfg.eval.batch_size) == (5, 2, 5, 2)


# ---- a config that sets nothing ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["extends: []\n", "extends: null\n", "{}\n"])
def test_a_config_that_sets_nothing_is_refused(tmp_path, text):
    path = tmp_path / "nothing.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert _one_line(info.value) == (f"config file {path.resolve()} sets nothing (an empty 'extends' and no keys); "
                                     "name the config it starts from (extends: demo.yaml) or write the settings")


def test_an_empty_extends_with_settings_is_a_whole_config(tmp_path):
    path = tmp_path / "whole.yaml"
    path.write_text("extends: []\niterations: 3\n")
    assert load_config(path).iterations == 3


# ---- huge values in messages ----------------------------------------------------------------------------------------

HUGE = "x" * 10_000_000


@pytest.mark.parametrize("override", [f"seed={HUGE}", f"{HUGE}=1", f"train.{HUGE}=1", f"model={HUGE}",
                                      f"orchestration.dask_address={HUGE}", f"rewards.{HUGE}=.nan"])
def test_a_huge_value_makes_a_short_error_line(override):
    with pytest.raises(SolrlError) as info:
        load_config(TINY, [override])
    message = _one_line(info.value)
    assert len(message) < 2 * EXCERPT_CHARS + 200, message


# ---- reward_models.<name>.batch_size ----------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "why"), [
    ("true", "Input should be a valid integer"), ("2.0", "Input should be a valid integer"),
    ("'4'", "Input should be a valid integer"), ("0", "Input should be greater than or equal to 1"),
    (str(MAX_BATCH + 1), f"Input should be less than or equal to {MAX_BATCH}")])
def test_a_reward_batch_size_is_a_whole_number_in_range(value, why):
    with pytest.raises(ConfigError) as info:
        load_config(TINY, [f"reward_models.embedded.batch_size={value}"])
    assert f"reward_models.embedded.batch_size: {why}" in _one_line(info.value)


def test_a_reward_batch_size_in_range_is_kept():
    from solrl_core.rewards.registry import reward_batch_size

    cfg = load_config(TINY, [f"reward_models.embedded.batch_size={MAX_BATCH}"])
    assert reward_batch_size("embedded", cfg.reward_models) == MAX_BATCH


# ---- prompts per iteration, at the draw -------------------------------------------------------------------------

def test_the_draw_refuses_more_prompts_than_the_set_has(tmp_path):
    path = tmp_path / "three.txt"
    path.write_text("a\nb\nc\n")
    with pytest.raises(SolrlError, match=r"^prompts.per_iteration is 4 but .* has 3 prompts"):
        iteration_prompts(load_config(TINY, [f"prompts.train={path}", "prompts.per_iteration=4"]), 0)
    cfg = load_config(TINY, [f"prompts.train={path}", "prompts.per_iteration=2", "seed=7"])
    order = torch.randperm(3, generator=derived_generator(7, 5, PURPOSE_PROMPTS))[:2].tolist()
    assert iteration_prompts(cfg, 5) == [["a", "b", "c"][i] for i in order]


def test_brackets_nested_past_the_bound_are_refused_before_the_parser_overflows(tmp_path):
    """50,000 nested flow collections crash libyaml's composer (a segfault, nothing printed): refused in one line
    before parsing; brackets inside quotes and comments do not count, and a config at the bound still loads."""
    from solrl_core.config.schema import MAX_YAML_DEPTH

    deep = "a: " + "[" * 50_000 + "]" * 50_000
    with pytest.raises(ConfigError, match=f"nest more than {MAX_YAML_DEPTH:,} levels deep"):
        load_yaml(deep, "deep.yaml")
    at_bound = "a: " + "[" * MAX_YAML_DEPTH + "]" * MAX_YAML_DEPTH
    quoted = f"b: '{'[' * 5000}'\nc: \"{'{' * 5000}\"  # {'[' * 5000}\n"
    assert load_yaml(quoted + at_bound)["b"] == "[" * 5000
