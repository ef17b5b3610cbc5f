"""Config: YAML -> validated objects, errors that name the key, overrides, `extends`."""

from pathlib import Path

import pytest

from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError
from repo_paths import ROOT



def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_demo_and_family_configs_validate():
    demo = load_config(ROOT / "configs" / "demo.yaml")
    assert demo.family == "sol_rl" and demo.regenerate.enabled and demo.explore.precision == "auto"
    nft = load_config(ROOT / "configs" / "families" / "baseline.yaml")
    assert nft.select.mode == "all" and not nft.regenerate.enabled and nft.explore.precision == "fp32"
    # a family inherits everything it does not override
    assert nft.train.optimizer.lr == demo.train.optimizer.lr


def test_unknown_key_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'explore\.stepz'"):
        load_config(write(tmp_path, "explore: {stepz: 3}\n"))


def test_wrong_type_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"'explore\.steps'"):
        load_config(write(tmp_path, "explore: {steps: many}\n"))


def test_bad_value_range_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"'train\.timestep_fraction'"):
        load_config(write(tmp_path, "train: {timestep_fraction: 1.5}\n"))


def test_cross_field_check(tmp_path):
    with pytest.raises(ConfigError, match="select.k"):
        load_config(write(tmp_path, "explore: {seeds_per_prompt: 4}\nselect: {k: 6}\n"))


def test_overrides_parse_yaml_scalars_and_nest(tmp_path):
    cfg = load_config(write(tmp_path, "name: x\n"), ["train.optimizer.lr=1e-5", "regenerate.enabled=false",
                                                     "family=naive_quant", "explore.steps=3",
                                                     "quant.skip_names=[a, b]"])
    assert cfg.train.optimizer.lr == 1e-5
    assert cfg.regenerate.enabled is False
    assert cfg.explore.steps == 3
    assert cfg.quant.skip_names == ["a", "b"]


def test_override_unknown_key_and_malformed(tmp_path):
    path = write(tmp_path, "name: x\n")
    with pytest.raises(ConfigError, match=r"unknown key 'train\.lrr'"):
        load_config(path, ["train.lrr=1"])
    with pytest.raises(ConfigError, match="key=value"):
        load_config(path, ["train.lr"])


def test_extends_merges_and_detects_cycles(tmp_path):
    write(tmp_path, "explore: {steps: 3, seeds_per_prompt: 8}\nselect: {k: 2}\n", "base.yaml")
    child = write(tmp_path, "extends: base.yaml\nexplore: {steps: 5}\n", "child.yaml")
    cfg = load_config(child)
    assert (cfg.explore.steps, cfg.explore.seeds_per_prompt, cfg.select.k) == (5, 8, 2)
    assert cfg.name == "child"
    write(tmp_path, "extends: b.yaml\n", "a.yaml")
    write(tmp_path, "extends: a.yaml\n", "b.yaml")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "a.yaml")


def test_extends_takes_a_packaged_config_by_name(tmp_path):
    """A config of your own, beside no copy of the shipped ones: `extends: demo.yaml` (or `demo`) is the packaged one;
    a file beside it of that name wins; neither is one line naming both places."""
    from solrl_core.config.sources import packaged_config

    for name in ("demo.yaml", "demo"):
        cfg = load_config(write(tmp_path, f"extends: {name}\niterations: 3\n", "mine.yaml"))
        assert cfg.iterations == 3 and cfg == load_config(packaged_config("demo"), ["iterations=3"])
    write(tmp_path, "extends: ROOT_CONFIG\niterations: 5\n".replace("ROOT_CONFIG", str(packaged_config("demo"))),
          "demo.yaml")
    assert load_config(write(tmp_path, "extends: demo.yaml\n", "mine.yaml")).iterations == 5
    with pytest.raises(ConfigError, match=r"extends 'nosuch.yaml', not found: neither a file beside it .* nor a "
                                          r"packaged config"):
        load_config(write(tmp_path, "extends: nosuch.yaml\n", "mine.yaml"))


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "a: [1, 2\n"))


def test_guardrail_ladder_must_be_concrete(tmp_path):
    with pytest.raises(ConfigError, match="ladder"):
        load_config(write(tmp_path, "explore: {guardrail: {enabled: true, ladder: [[auto, 6]]}}\n"))
    with pytest.raises(ConfigError, match="explore.precision"):
        load_config(write(tmp_path, "explore: {precision: fp3}\n"))
