"""Integer settings have bounds a machine holds (a value past one is refused before anything is written), are whole
numbers (not true, not 2.5), and say their bounds in their descriptions (docs/config.md)."""

from __future__ import annotations

import annotated_types
import pytest
from pydantic import BaseModel

from repo_paths import TINY
from solrl_core.config import schema as config_module
from solrl_core.config.schema import MAX_ITERATIONS, MAX_PROMPTS, MAX_SEED, MAX_SEEDS, RunConfig
from solrl_core.config.loading import load_config
from solrl_core.config.explain import sections
from solrl_core.errors import ConfigError, SolrlError


def _int_fields():
    for section, model in sections().items():
        for name, field in model.model_fields.items():
            if field.annotation in (int, int | None):
                yield f"{section}.{name}".lstrip("."), field


def _bound(field, kind):
    return next(getattr(m, kind) for m in field.metadata if isinstance(m, getattr(annotated_types, kind.capitalize())))


def test_every_integer_setting_is_strict_bounded_and_says_its_bounds():
    fields = dict(_int_fields())
    assert {"iterations", "seed", "explore.seeds_per_prompt", "train.micro_batch", "eval.every"} <= set(fields)
    for key, field in fields.items():
        low, high = _bound(field, "ge"), _bound(field, "le")
        assert high <= MAX_SEED, key  # fits an int64
        assert any(getattr(m, "strict", False) for m in field.metadata), f"{key} is not strict"
        assert field.description.endswith(f"{low} to {high:,}"), key


@pytest.mark.parametrize("key, accepted, refused", [
    ("iterations", MAX_ITERATIONS, MAX_ITERATIONS + 1),
    ("iterations", 1, 100_000_000_000_000_000_000),
    ("seed", MAX_SEED, MAX_SEED + 1),
    ("seed", 0, -1),
    ("explore.seeds_per_prompt", config_module.MAX_SEEDS, config_module.MAX_SEEDS + 1),
    ("explore.batch_size", config_module.MAX_BATCH, config_module.MAX_BATCH + 1),
    ("prompts.per_iteration", config_module.MAX_PROMPTS, config_module.MAX_PROMPTS + 1),
    ("train.lora_rank", config_module.MAX_RANK, config_module.MAX_RANK + 1),
    ("train.processes", config_module.MAX_PROCESSES, config_module.MAX_PROCESSES + 1),
    ("eval.every", 0, MAX_ITERATIONS + 1),
    ("audit.every", MAX_ITERATIONS, -1),
])
def test_a_value_past_a_bound_is_refused_naming_the_key(key, accepted, refused):
    assert _get(load_config(TINY, [f"{key}={accepted}"]), key) == accepted
    with pytest.raises(ConfigError, match=f"'{key}'"):
        load_config(TINY, [f"{key}={refused}"])


@pytest.mark.parametrize("value", ["true", "2.5", "10.0", "1e20", "'3'"])
def test_integer_settings_take_whole_numbers_only(value):
    with pytest.raises(ConfigError, match="'explore.steps': Input should be a valid integer"):
        load_config(TINY, [f"explore.steps={value}"])


def test_guardrail_ladder_steps_are_bounded_whole_numbers():
    ladder = load_config(TINY, ["explore.guardrail.ladder=[[fp32, 10000]]"]).explore.guardrail.ladder
    assert ladder == [("fp32", 10000)]
    for steps in ("10001", "0", "true", "6.0"):
        with pytest.raises(ConfigError, match="explore.guardrail.ladder: steps must be a whole number from 1 to 10,000"):
            load_config(TINY, [f"explore.guardrail.ladder=[[fp32, {steps}]]"])


def test_the_cli_refuses_an_out_of_range_value_in_one_line_before_writing(capsys, tmp_path):
    from solrl.cli.main import main

    run_dir = tmp_path / "run"
    capsys.readouterr()
    assert main(["train", str(TINY), "--run-dir", str(run_dir), "--set", "iterations=100000000000000000000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("solrl: error: ") and "'iterations'" in err[0]
    assert "less than or equal to 1000000" in err[0]
    assert not run_dir.exists()


def test_any_run_seed_gives_unique_int64_noise_seeds_independent_of_n():
    from solrl_core.stages.draws import candidate_seed

    cfg = load_config(TINY)
    for seed in (0, 7, MAX_SEED):
        run = cfg.model_copy(update={"seed": seed})
        seeds = [candidate_seed(run, it, p, c) for it in (0, 1, 5) for p in range(3) for c in range(5)]
        assert len(set(seeds)) == len(seeds) and all(0 <= s <= MAX_SEED for s in seeds)
    # the largest iteration, prompt slot and candidate the bounds allow stay within 64 bits and below the next slot
    last = candidate_seed(cfg, MAX_ITERATIONS - 1, MAX_PROMPTS - 1, MAX_SEEDS - 1)
    assert last < candidate_seed(cfg.model_copy(update={"seed": 1}), 0, 0, 0) <= MAX_SEED
    # neither N nor the prompts per iteration enter a seed: fewer seeds per prompt draw the first of more
    few = load_config(TINY, ["explore.seeds_per_prompt=2", "select.k=2", "prompts.per_iteration=1"])
    many = load_config(TINY, ["explore.seeds_per_prompt=8", "prompts.per_iteration=3"])
    assert [candidate_seed(few, 4, 0, c) for c in range(2)] == [candidate_seed(many, 4, 0, c) for c in range(2)]


def _get(cfg: BaseModel, key: str):
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def test_defaults_are_within_their_bounds():
    RunConfig.model_validate(RunConfig().model_dump())  # strict validation of every default (ints stay ints)
