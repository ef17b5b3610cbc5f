"""The reward registry: names, lazy loading, config/environment resolution, weighted sums, non-finite guard (what
scoring without model weights imports: tests/e2e/test_reward_imports.py)."""

import math

import numpy as np
import pytest

from solrl_core.errors import SolrlError
from solrl_core.rewards import (
    REWARDS,
    configure_reward_models,
    get_reward,
    parse_reward_models,
    preflight_rewards,
    score_images,
)
from solrl_core.rewards.base import Reward
from solrl_core.rewards.jpeg import jpeg_compressibility
from solrl_core.rewards.registry import clear_reward_cache
from solrl_core.rewards.tiny import sample_batch, write_tiny_clip, write_tiny_hps


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def _no_global_config():
    configure_reward_models(None)
    yield
    configure_reward_models(None)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    hps_path, hps_arch = write_tiny_hps(root / "hpsv2", seed=2)
    return root, {
        "pickscore": {"path": str(write_tiny_clip(root / "PickScore_v1", 0, "gelu", math.log(1 / 0.07)))},
        "hpsv2": {"path": str(hps_path), "arch": str(hps_arch)},
    }


def test_names():
    assert {"pickscore", "clipscore", "hpsv2", "imagereward", "jpeg", "embedded"} <= set(REWARDS)
    assert all(issubclass(cls, Reward) and cls.name == name for name, cls in REWARDS.items())
    images, prompts = sample_batch(3, 32)
    assert np.array_equal(get_reward("jpeg")(images, prompts), jpeg_compressibility(images, prompts)["reward"])


def test_zero_weights_and_the_process_wide_configuration(models):
    """A weight of 0 still scores the reward (evaluation only); `configure_reward_models` stands in for `models`.
    (The weighted sum over every reward: test_reward_invariances.py.)"""
    _, specs = models
    images, prompts = sample_batch(5, 48)
    weights = {"pickscore": 0.7, "hpsv2": 2.0, "jpeg": -0.01, "embedded": 0.0}
    total, per = score_images(images, prompts, weights, models=specs)
    assert set(per) == set(weights)
    assert np.allclose(total, sum(w * per[n] for n, w in weights.items()), rtol=0, atol=1e-12)
    assert per["embedded"].min() > 0.5
    configure_reward_models(specs)
    total2, per2 = score_images(images, prompts, weights)
    assert np.array_equal(total, total2) and all(np.array_equal(per[n], per2[n]) for n in weights)


def test_models_load_once_per_spec(models):
    _, specs = models
    a = get_reward("pickscore", specs)
    assert get_reward("pickscore", specs) is a
    other = get_reward("pickscore", {"pickscore": {**specs["pickscore"], "batch_size": 2}})
    assert other is not a and other.batch_size == 2
    clear_reward_cache()
    assert get_reward("pickscore", specs) is not a


def test_files_come_from_the_environment(models, monkeypatch):
    root, specs = models
    images, prompts = sample_batch(2, 32)
    expected = get_reward("pickscore", specs)(images, prompts)
    monkeypatch.setenv("SOLRL_REWARD_MODELS_DIR", str(root))  # default layout: $DIR/PickScore_v1
    assert np.array_equal(get_reward("pickscore")(images, prompts), expected)
    monkeypatch.delenv("SOLRL_REWARD_MODELS_DIR")
    monkeypatch.setenv("SOLRL_PICKSCORE_PATH", specs["pickscore"]["path"])
    assert np.array_equal(score_images(images, prompts, {"pickscore": 1.0})[1]["pickscore"], expected)
    monkeypatch.setenv("SOLRL_HPSV2_PATH", specs["hpsv2"]["path"])
    monkeypatch.setenv("SOLRL_HPSV2_ARCH", specs["hpsv2"]["arch"])
    assert np.isfinite(get_reward("hpsv2")(images, prompts)).all()
    # the config wins over the environment
    monkeypatch.setenv("SOLRL_PICKSCORE_PATH", str(root / "elsewhere"))
    assert np.array_equal(get_reward("pickscore", specs)(images, prompts), expected)
    with pytest.raises(SolrlError, match=r"pickscore: no weights .* at .*elsewhere"):
        get_reward("pickscore")


def test_missing_weights_fail_preflight_and_scoring_with_one_line(tmp_path):
    with pytest.raises(SolrlError) as info:
        preflight_rewards({"imagereward": 1.0}, {"imagereward": {"path": str(tmp_path / "ImageReward.pt")}})
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "ImageReward.pt") in message and "THUDM/ImageReward" in message
    with pytest.raises(SolrlError, match=r"clipscore: no weights .*configured.*openai/clip-vit-large-patch14.*SOLRL_CLIPSCORE_PATH"):
        score_images(*sample_batch(1, 32), {"clipscore": 1.0})
    preflight_rewards({"jpeg": 1.0, "embedded": 0.5})


def test_config_section_is_validated():
    assert parse_reward_models({"pickscore": {"path": "/x", "batch_size": 8}})["pickscore"].batch_size == 8
    with pytest.raises(SolrlError, match=r"reward_models: unknown reward 'pickscor'"):
        parse_reward_models({"pickscor": {"path": "/x"}})
    with pytest.raises(SolrlError, match=r"reward_models\.pickscore: unknown key 'weights'"):
        parse_reward_models({"pickscore": {"weights": "/x"}})
    with pytest.raises(SolrlError, match=r"reward_models\.pickscore: key 'med_config' does not apply to pickscore"):
        parse_reward_models({"pickscore": {"med_config": "/x"}})
    with pytest.raises(SolrlError, match=r"reward_models\.hpsv2\.batch_size"):
        parse_reward_models({"hpsv2": {"batch_size": 0}})
    with pytest.raises(SolrlError, match=r"unknown reward 'nope'"):
        score_images(*sample_batch(1, 32), {"nope": 1.0})


class _Broken(Reward):
    name = "broken"
    default_batch_size = 2

    def score_batch(self, images, prompts):
        return np.array([np.nan if p == "bad" else 0.0 for p in prompts])


def test_non_finite_scores_stop_with_the_reward_named(models, monkeypatch):
    images, _ = sample_batch(4, 32)
    with pytest.raises(SolrlError, match=r"reward broken returned non-finite values \(1 of 4; first at image 3 \(prompt 'bad'\)\)"):
        _Broken()(images, ["ok", "ok", "fine", "bad"])
    _, specs = models
    reward = get_reward("pickscore", specs)
    monkeypatch.setattr(reward, "score_batch", lambda images, prompts: np.full(len(images), np.inf))
    with pytest.raises(SolrlError, match=r"reward pickscore returned non-finite values"):
        score_images(images, ["a"] * 4, {"pickscore": 1.0}, models=specs)


def test_progress_bar_for_several_batches(capsys):
    images, prompts = sample_batch(5, 32)
    reward = get_reward("jpeg", {"jpeg": {"batch_size": 2}})
    assert reward.batch_size == 2
    reward(images, prompts, progress=True)
    assert "reward jpeg" in capsys.readouterr().err
    reward(images, prompts, progress=False)
    assert capsys.readouterr().err == ""
