"""Settings that once passed validation and broke a stage later, or did nothing where they were set, refused when the
config is read, in one line naming the key: a run name that is a path, a key written twice in one YAML mapping, a
step cache's counts out of range or on a family that trains on its explore samples, more AWM strata than the
schedule has steps; and commands that check their arguments and destination before their work (#51)."""

from __future__ import annotations

import pytest

from solrl.cli.main import main
from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError


def _refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(TINY, list(overrides))
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name, why", [("../../x", "path separator"), ("a/b", "path separator"), ("..", "or .."),
                                       ("a\x00b", "U+0000"), ("ab\u202ecd", "U+202E"), ("x" * 201, "200 bytes")])
def test_a_run_name_is_one_plain_path_component(name, why):
    message = _refused(f"name={name}")
    assert why in message and "one plain path component" in message
    assert load_config(TINY, ["name=my-run_2.b"]).name == "my-run_2.b"


def test_a_key_written_twice_in_one_mapping_is_refused(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text(f"extends: {TINY}\ntrain:\n  lora_rank: 4\n  micro_batch: 2\n  lora_rank: 8\n")
    with pytest.raises(ConfigError, match=r"line 5: the key 'lora_rank' is written twice in one mapping"):
        load_config(path)
    path.write_text(f"extends: {TINY}\ntrain: {{lora_rank: 4}}\neval: {{lora_rank: 4}}\n")  # two mappings: not twice
    with pytest.raises(ConfigError, match="unknown key 'eval.lora_rank'"):
        load_config(path)


@pytest.mark.parametrize("options, message", [
    ("{cache_interval: 0}", "cache_interval: a whole number from 1"),
    ("{cache_interval: two}", "cache_interval: a whole number from 1"),
    ("{cache_interval: -2}", "cache_interval: a whole number from 1"),
    ("{disable_cache_before_step: -1}", "disable_cache_before_step: a whole number from 0"),
    ("{max_order: 1.5}", "max_order: a whole number from 0"),
    ("{use_lite_mode: maybe}", "use_lite_mode: true or false"),
])
def test_a_step_caches_counts_are_bounded_where_they_are_set(options, message):
    assert message in _refused("explore.cache.kind=taylorseer", f"explore.cache.options={options}")
    load_config(TINY, ["explore.cache.kind=taylorseer", "explore.cache.options={cache_interval: 2, "
                       "disable_cache_after_step: null}"])


def test_a_step_cache_only_where_the_explore_only_ranks():
    message = _refused("family=naive_quant", "regenerate.enabled=false", "explore.cache.kind=taylorseer")
    assert "family naive_quant: explore.cache.kind is taylorseer" in message and "family: sol_rl" in message


def test_awm_strata_fit_the_schedule():
    assert "more strata than the 3 steps" in _refused("objective.name=awm")  # 6 of int(4 x 0.9) = 3
    assert "covers no step" in _refused("objective.name=awm", "objective.awm.times_per_sample=1",
                                        "objective.awm.timestep_fraction=0.2")
    assert load_config(TINY, ["objective.name=awm", "objective.awm.times_per_sample=3"]).objective.awm.times_per_sample == 3


@pytest.mark.parametrize("args, message", [
    (["--prompts", "0"], "--prompts 0: give 1 or more"),
    (["--seeds", "1"], "--seeds 1: give 2 or more"),
    (["--batch-size", "0"], "--batch-size 0: give 1 or more"),
    (["--min-spearman", "1.5"], "--min-spearman 1.5: a rank correlation lies from -1 to 1"),
])
def test_calibrate_explore_checks_its_arguments_before_sampling(args, message, capsys):
    assert main(["calibrate-explore", str(TINY), *args, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err


def test_a_written_file_goes_where_a_file_can_go(tmp_path, capsys):
    (tmp_path / "folder").mkdir()
    assert main(["presets", "--write", "demo", str(tmp_path / "folder"), "--force"]) == 2
    assert "is a directory, not a file" in capsys.readouterr().err
    (tmp_path / "plain").write_text("x")
    assert main(["presets", "--write", "demo", str(tmp_path / "plain" / "demo.yaml")]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    assert main(["calibrate-explore", str(TINY), "--write", str(tmp_path / "folder"), "--force", "--quiet"]) == 2
    assert "is a directory, not a file" in capsys.readouterr().err


def test_video_frames_only_where_an_image_reward_scores_videos():
    from repo_paths import ROOT

    video = ROOT / "configs" / "demo_video.yaml"
    with pytest.raises(ConfigError, match="embedded_motion scores whole videos, so it picks no frames"):
        load_config(video, ["reward_models={embedded_motion: {video_frames: 2}}"])
    assert "model.kind embedded makes images, which have no frames" in _refused(
        "reward_models={embedded: {video_frames: 2}}")
    assert "reward_models.embedded.video_aggregate: model.kind embedded makes images" in _refused(
        "reward_models={embedded: {video_aggregate: min}}")
    assert load_config(video, ["reward_models={embedded: {video_frames: 2}}"]).reward_models["embedded"] == {
        "video_frames": 2}  # an image reward on videos: the frames it scores


def test_guidance_in_training_is_refused_where_the_update_would_ignore_it():
    """The update never runs classifier-free guidance: guidance.train on a model without a distilled guidance input
    is refused at load, in one line naming the key, for every registered kind; a distilled one (FLUX.1, Kontext)
    reads it. Rollout and evaluation CFG of every model loads, editing models' included (their unconditional branch
    sees the source: tests/unit/models/test_sampler.py)."""
    from solrl_core.models.backbones.registry import backbone_specs
    from solrl_core.config.presets import presets

    by_kind = {}
    for name, preset in presets().items():
        by_kind.setdefault(preset.model, name)
    specs = [s for s in backbone_specs() if s.key in by_kind]
    assert any(s.defaults.distilled_guidance for s in specs) and any(s.edits for s in specs)
    for spec in specs:
        config = by_kind[spec.key]
        if spec.defaults.distilled_guidance:
            assert load_config(config, ["guidance.train=2.5"]).guidance.train == 2.5
        else:
            with pytest.raises(ConfigError) as info:
                load_config(config, ["guidance.train=4"])
            assert "guidance.train is 4, but model.kind" in str(info.value)
            assert "set guidance.train: 1" in str(info.value) and "\n" not in str(info.value)
        if not spec.defaults.distilled_guidance:
            loaded = load_config(config, ["guidance.rollout=4", "guidance.eval=4"]).guidance
            assert (loaded.rollout, loaded.eval) == (4, 4)
