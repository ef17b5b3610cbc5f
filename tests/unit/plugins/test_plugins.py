"""Plug-ins: `model.kind: package.module:Class` names a backbone adapter, and a reward name `package.module:Class`
a reward, that live outside solrl (here: a package written into tmp_path and put on the path; training through one:
tests/e2e/test_plugin_training.py)."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_package import package  # noqa: F401 - a fixture: the plug-ins' package on sys.path
from solrl_core.config.loading import validate_config
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.models.backbones.embedded import EmbeddedBackbone
from solrl_core.models.backbones.registry import adapter_class, load_backbone
from solrl_core.rewards import parse_reward_models, preflight_rewards, score_images
from solrl_core.rewards.registry import reward_batch_size


def test_a_backbone_plug_in_is_resolved_and_loaded(package):
    kind = f"{package}.adapter:MyBackbone"
    cfg = validate_config({"model": {"kind": kind}})
    cls = adapter_class(cfg.model.kind)
    assert cls.__name__ == "MyBackbone" and issubclass(cls, EmbeddedBackbone)
    backbone = load_backbone(cfg.model)
    assert isinstance(backbone, cls) and backbone.defaults.lora_targets == ["to_q", "to_v"]


def test_a_bad_backbone_plug_in_is_one_config_error_line(package):
    cases = {
        "nowhere_pkg.adapter:MyBackbone": "model.kind 'nowhere_pkg.adapter:MyBackbone': cannot import module "
        "'nowhere_pkg.adapter' (No module named 'nowhere_pkg')",
        f"{package}.adapter:Missing": f"model.kind '{package}.adapter:Missing': module '{package}.adapter' has no "
        "'Missing'",
        f"{package}.adapter:NotABackbone": f"model.kind '{package}.adapter:NotABackbone' is not a "
        "solrl_core.models.backbones.base.Backbone subclass",
        f"{package}.adapter:": f"model.kind '{package}.adapter:': write a plug-in as package.module:Class",
    }
    for kind, message in cases.items():
        with pytest.raises(ConfigError) as info:
            validate_config({"model": {"kind": kind}})
        assert str(info.value) == f"config: {message}"


def test_a_reward_plug_in_scores_wherever_a_reward_name_does(package):
    name = f"{package}.reward:Brightness"
    images = np.stack([np.full((8, 8, 3), v, np.uint8) for v in (0, 51, 255, 102)])
    prompts = ["a", "b", "c", "d"]
    total, per = score_images(images, prompts, {name: 2.0, "jpeg": 0.0})
    assert per[name] == pytest.approx([0.0, 0.2, 1.0, 0.4])
    assert total == pytest.approx(2 * per[name])
    preflight_rewards({name: 1.0})
    specs = parse_reward_models({name: {"batch_size": 2}})
    assert reward_batch_size(name, specs) == 2 and reward_batch_size(name, {}) == 3
    with pytest.raises(SolrlError, match=r"reward_models.*: key 'path' does not apply"):
        parse_reward_models({name: {"path": "x"}})


def test_a_bad_reward_plug_in_is_one_error_line(package):
    images, prompts = np.zeros((1, 8, 8, 3), np.uint8), ["a"]
    with pytest.raises(SolrlError) as info:
        score_images(images, prompts, {f"{package}.adapter:MyBackbone": 1.0})
    assert str(info.value) == (f"reward '{package}.adapter:MyBackbone' is not a solrl_core.rewards.base.Reward "
                               "subclass")
    with pytest.raises(SolrlError, match=r"^reward_models: reward 'nowhere_pkg.r:R': cannot import module"):
        parse_reward_models({"nowhere_pkg.r:R": None})
