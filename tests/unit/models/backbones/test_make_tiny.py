"""`solrl make-tiny MODEL DIR`: the tiny model bundle, and its run overrides applied when model.path points at it
(an unknown model: tests/e2e/test_make_tiny_cli.py)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from repo_paths import ROOT
from solrl.cli.main import main
from solrl_core.tiny_bundle import TINY_PROMPTS
from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError
from solrl_core.rewards.registry import REWARDS

PRESETS = ROOT / "configs" / "presets"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, one_torch_thread):
    out = tmp_path_factory.mktemp("tiny") / "sd35m"
    assert main(["make-tiny", "sd35m", str(out)]) == 0
    return out


def test_make_tiny_writes_the_model_rewards_prompts_and_overrides(tiny_dir):
    assert json.loads((tiny_dir / "model_index.json").read_text())["_class_name"] == "StableDiffusion3Pipeline"
    assert (tiny_dir / "transformer" / "config.json").is_file()
    assert (tiny_dir / "prompts.txt").read_text().splitlines() == list(TINY_PROMPTS)
    overrides = yaml.safe_load((tiny_dir / "solrl_tiny.yaml").read_text())
    assert overrides["model"]["kind"] == "sd35"
    # every reward with weight files but the one whose weights ship in the package
    assert set(overrides["reward_models"]) == {name for name, cls in REWARDS.items() if cls.needs_weights} - {
        "embedded_learned"}
    for spec in overrides["reward_models"].values():
        paths = [value for value in spec.values() if isinstance(value, str) and os.sep in value]  # not arch names
        assert paths and all(path.startswith(str(tiny_dir / "rewards")) and os.path.exists(path) for path in paths)
    listed = yaml.safe_load((tiny_dir / "rewards" / "reward_models.yaml").read_text())["reward_models"]
    assert listed == overrides["reward_models"]


def test_overrides_apply_over_the_preset_and_set_still_wins(tiny_dir, capsys):
    preset = PRESETS / "sd35m_sol_rl_clipscore.yaml"
    official = load_config(preset)
    assert capsys.readouterr().err == ""  # no tiny model, no notice
    cfg = load_config(preset, [f"model.path={tiny_dir}"])
    notice = capsys.readouterr().err.strip().splitlines()
    assert len(notice) == 1 and "tiny model" in notice[0] and "applied" in notice[0]
    assert (cfg.model.device, cfg.model.dtype, cfg.model.resolution) == ("cpu", "float32", 64)
    assert (cfg.prompts.per_iteration, cfg.explore.seeds_per_prompt, cfg.select.k) == (2, 8, 4)
    assert cfg.prompts.train == str(tiny_dir / "prompts.txt") and cfg.eval.every == 0
    assert (cfg.train.processes, cfg.train.dist_backend) == (1, "gloo")
    assert cfg.reward_models["clipscore"]["path"] == str(tiny_dir / "rewards" / "clip-vit-large-patch14")
    # the family's shape and the training recipe stay official
    for key in ("family", "rewards"):
        assert getattr(cfg, key) == getattr(official, key)
    assert cfg.explore.precision == official.explore.precision and cfg.explore.steps == 6
    assert cfg.regenerate.model_dump() == {**official.regenerate.model_dump(), "batch_size": 8}
    assert cfg.train.optimizer == official.train.optimizer
    assert cfg.train.timestep_fraction == official.train.timestep_fraction

    # --set wins over the tiny overrides, wherever model.path comes from
    sets = ["explore.seeds_per_prompt=12", "select.k=6", "model.resolution=32"]
    cfg = load_config(preset, [*sets, f"model.path={tiny_dir}"])
    assert (cfg.explore.seeds_per_prompt, cfg.select.k, cfg.model.resolution) == (12, 6, 32)
    assert cfg.model.device == "cpu"
    child = tiny_dir.parent / "child.yaml"
    child.write_text(f"extends: {preset}\nmodel: {{path: {tiny_dir}}}\nexplore: {{seeds_per_prompt: 20}}\n")
    cfg = load_config(child, ["select.k=2"])
    assert (cfg.explore.seeds_per_prompt, cfg.select.k) == (8, 2)  # the tiny file beats the YAML, not --set
    capsys.readouterr()


def test_a_tiny_model_of_another_kind_is_refused(tiny_dir):
    with pytest.raises(ConfigError, match="holds a tiny 'sd35' model but model.kind is 'flux1'"):
        load_config(PRESETS / "flux1_sol_rl_pickscore.yaml", [f"model.path={tiny_dir}"])
