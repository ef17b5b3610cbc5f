"""`solrl rewards check --config CONFIG` on every run config shipped under configs/: it scores sample images of the
size the config's runs make (the embedded_learned reward takes 32 px only) and never raises for a reward: one whose
model files are not here says so in its row."""

from __future__ import annotations

import math

import numpy as np
import pytest

from solrl_core.models.backbones.registry import specs_of_kind
from solrl_core.config.loading import config_kind, load_config
from solrl_core.config.sources import packaged_configs
from solrl_core.rewards import commands
from solrl_core.rewards.commands import check_config_rewards, config_image_size

# `solrl bench`'s and `solrl matrix`'s configs: the rewards check refuses them as run configs (ConfigError)
NOT_RUN_CONFIGS = {name for name, path in packaged_configs().items() if config_kind(path)[0] != "run"}
RUN_CONFIGS = sorted(set(packaged_configs()) - NOT_RUN_CONFIGS)
N_IMAGES = 2


@pytest.mark.parametrize("name", RUN_CONFIGS)
def test_the_check_scores_or_explains_every_reward_of_a_shipped_config(name):
    cfg = load_config(name)
    rows = check_config_rewards(cfg, n_images=N_IMAGES)
    assert [row["name"] for row in rows] == list(dict.fromkeys([*cfg.rewards, *cfg.evaluation_rewards()]))
    for row in rows:
        if row["ok"]:
            assert len(row["scores"]) == N_IMAGES and all(math.isfinite(s) for s in row["scores"])
            assert row["mean"] == pytest.approx(float(np.mean(row["scores"])))
        else:  # only a reward whose weights are not here may fail, and its row says so
            assert row["found"] is False, row
            assert row["error"].startswith(f"{row['name']}: no weights") and "\n" not in row["error"], row


@pytest.mark.parametrize("name", ["demo", "demo_learned"])
def test_the_demos_score_at_their_own_resolution(name):
    cfg = load_config(name)
    assert cfg.model.resolution is None
    assert config_image_size(cfg) == specs_of_kind(cfg.model.kind)[0].defaults.resolution
    rows = {row["name"]: row for row in check_config_rewards(cfg, n_images=N_IMAGES)}
    assert rows["embedded_learned"]["ok"] and rows["embedded"]["ok"], rows


def test_the_image_size_is_the_configured_resolution_when_there_is_one():
    assert config_image_size(load_config("flux1_sol_rl_pickscore", ["model.resolution=256"])) == 256


def test_a_reward_that_fails_in_its_own_code_is_a_row_not_a_traceback(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied\n(4x4160 and 1088x128)")

    monkeypatch.setattr(commands, "get_reward", lambda name, models: broken)
    rows = check_config_rewards(load_config("demo"), n_images=N_IMAGES)
    assert all(not row["ok"] for row in rows)
    assert rows[0]["error"] == ("embedded failed: RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x4160 and "
                                "1088x128)")


def test_a_video_config_is_checked_on_videos_of_its_frames():
    """The video demo's motion reward and a Wan preset's image reward (scoring every frame) get videos."""
    from solrl_core.rewards.commands import config_frames

    assert config_frames(load_config("demo_video")) == 4 and config_frames(load_config("demo")) is None
    rows = check_config_rewards(load_config("demo_video"), n_images=3)
    assert rows[0]["name"] == "embedded_motion" and rows[0]["ok"] and min(rows[0]["scores"]) > 0.9  # renders
    wan = load_config("wan_sol_rl_pickscore", ["rewards={jpeg: 1.0, temporal_consistency: 0.5}", "eval.rewards=null"])
    assert config_frames(wan) == 5
    rows = {row["name"]: row for row in check_config_rewards(wan, n_images=2)}
    assert rows["jpeg"]["ok"] and rows["temporal_consistency"]["ok"]
    assert max(rows["temporal_consistency"]["scores"]) < 1  # the frames move
