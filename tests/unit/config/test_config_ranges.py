"""Float settings are finite and within the ranges the references use, reward weights add up to more than 0, the
resolution fits the backbone, and an iteration draws no more prompts than its set has: each refused in one line
before anything is written."""

from __future__ import annotations

import json
import math

import annotated_types
import pytest
from pydantic.types import AllowInfNan

from repo_paths import TINY
from solrl_core.models.backbones.registry import backbone_spec, backbone_specs, load_backbone, specs_of_kind
from solrl_core.bench.bench_config import BenchConfig
from solrl_core.config.schema import MAX_LR, ModelConfig, RunConfig, _takes_floats
from solrl_core.config.loading import load_config
from solrl_core.config.explain import sections
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.prompts import check_train_prompts, train_prompt_set


def _float_fields():
    for section, model in {**sections(), "bench": BenchConfig, "bench.cost": BenchConfig.model_fields[
            "cost"].annotation}.items():
        for name, field in model.model_fields.items():
            if field.annotation in (float, float | None):
                yield f"{section}.{name}".lstrip("."), field


def test_every_float_setting_is_finite_bounded_and_says_so():
    fields = dict(_float_fields())
    assert {"train.optimizer.lr", "train.optimizer.eps", "guidance.rollout", "explore.guardrail.floor",
            "objective.diffusionnft.kl_weight", "bench.margin", "bench.cost.utilisation"} <= set(fields)
    for key, field in fields.items():
        assert any(isinstance(m, AllowInfNan) and not m.allow_inf_nan for m in field.metadata), key
        assert any(isinstance(m, (annotated_types.Ge, annotated_types.Gt)) for m in field.metadata), key
        assert "; finite, " in field.description, key


@pytest.mark.parametrize("key, accepted, refused, message", [
    ("train.optimizer.lr", MAX_LR, "1e30", "less than or equal to 1"),
    ("train.optimizer.lr", "1e-4", "inf", "finite number"),
    ("train.optimizer.lr", "3.0e-4", ".inf", "finite number"),
    ("train.optimizer.lr", "1e-6", "0", "greater than 0"),
    ("train.optimizer.eps", "1e-8", ".nan", "finite number"),
    ("train.optimizer.weight_decay", "0", "-1e-4", "greater than or equal to 0"),
    ("train.optimizer.grad_clip", "null", "0", "greater than 0"),
    ("train.optimizer.grad_clip", "1.0", ".inf", "finite number"),
    ("objective.diffusionnft.beta", "0.1", "0", "greater than 0"),
    ("objective.diffusionnft.adv_clip", "5", "-.inf", "finite number"),
    ("objective.diffusionnft.kl_weight", "0", "-1", "greater than or equal to 0"),
    ("objective.flow_grpo.noise_level", "0.8", "0", "greater than 0"),
    ("objective.flow_grpo.clip_range", "0.2", "1", "less than 1"),
    ("objective.flow_grpo.timestep_fraction", "1", "1.5", "less than or equal to 1"),
    ("objective.awm.timestep_fraction", "1", "1.5", "less than or equal to 1"),
    ("objective.awm.old_eta_max", "0.5", "1", "less than 1"),
    ("objective.awm.ghuber_power", "0.5", "0", "greater than 0"),
    ("train.timestep_fraction", "1", "1.5", "less than or equal to 1"),
    ("train.timestep_fraction", "0.4", "0", "greater than 0"),
    ("train.lora_alpha", "8", ".inf", "finite number"),
    ("train.old_eta_max", "1", "1.01", "less than or equal to 1"),
    ("guidance.rollout", "4.5", ".inf", "finite number"),
    ("guidance.eval", "0", "-1", "greater than or equal to 0"),
    ("explore.guardrail.floor", "-1", ".nan", "finite number"),
])
def test_a_float_out_of_its_range_is_refused_naming_the_key(key, accepted, refused, message):
    value = _get(load_config(TINY, [f"{key}={accepted}"]), key)
    assert value == (None if accepted == "null" else float(accepted))
    with pytest.raises(ConfigError, match=f"'{key}': Input should be .*{message}") as info:
        load_config(TINY, [f"{key}={refused}"])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["[]", "[1, 20000]", "-1"])
def test_the_sde_window_start_is_a_step_or_a_list_of_steps(value):
    assert _get(load_config(TINY, ["objective.flow_grpo.window_start=[1, 2, 3]"]),
                "objective.flow_grpo.window_start") == [1, 2, 3]
    with pytest.raises(ConfigError, match="objective.flow_grpo.window_start") as info:
        load_config(TINY, [f"objective.flow_grpo.window_start={value}"])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("override", ["train.optimizer.lr=true", "guidance.train=yes",
                                      "train.optimizer.betas=[0.9, true]", "rewards={embedded: on}"])
def test_a_float_setting_refuses_booleans(override):
    with pytest.raises(ConfigError, match="Input should be a number, not true or false"):
        load_config(TINY, [override])


def test_adam_betas_are_each_from_0_to_below_1():
    assert load_config(TINY, ["train.optimizer.betas=[0, 0.99]"]).train.optimizer.betas == (0.0, 0.99)
    for betas in ("[0.9, 1.0]", "[-0.1, 0.999]", "[0.9, .nan]", "[0.9, .inf]"):
        with pytest.raises(ConfigError, match=r"train.optimizer.betas: each decay must be ≥ 0 and < 1"):
            load_config(TINY, [f"train.optimizer.betas={betas}"])


def test_the_cli_refuses_an_infinite_learning_rate_in_one_line_before_writing(capsys, tmp_path):
    from solrl.cli.main import main

    run_dir = tmp_path / "run"
    for lr in ("inf", "1e30"):
        capsys.readouterr()
        assert main(["train", str(TINY), "--run-dir", str(run_dir), "--set", f"train.optimizer.lr={lr}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("solrl: error: ") and "'train.optimizer.lr'" in err[0]
        assert not run_dir.exists()


@pytest.mark.parametrize("weights, total", [("{embedded: 0}", "0"), ("{embedded: 0, jpeg: 0.0}", "0"),
                                            ("{embedded: 1, jpeg: -1}", "0"), ("{embedded: -1}", "-1")])
def test_reward_weights_need_a_positive_total(weights, total):
    with pytest.raises(ConfigError, match=rf"rewards: the weights add up to {total}; they must add up to more than 0"):
        load_config(TINY, [f"rewards={weights}"])
    with pytest.raises(ConfigError, match=rf"eval.rewards: the weights add up to {total};"):
        load_config(TINY, [f"eval.rewards={weights}"])


def test_reward_weights_may_include_a_penalty_and_a_score_only_reward():
    cfg = load_config(TINY, ["rewards={embedded: 1.0, jpeg: -0.5, jpeg_compressibility: 0}"])
    assert cfg.rewards == {"embedded": 1.0, "jpeg": -0.5, "jpeg_compressibility": 0.0}
    for weight in (".nan", ".inf", "-.inf"):
        with pytest.raises(ConfigError, match="rewards.jpeg: the weight must be a finite number"):
            load_config(TINY, [f"rewards={{embedded: 1.0, jpeg: {weight}}}"])


def test_bench_floats_and_counts_are_bounded():
    base = {"families": ["f.yaml"], "iterations": 2, "eval_every": 1}
    assert BenchConfig.model_validate(base).margin == 0.01
    for bad in ({"margin": float("inf")}, {"margin": -0.1}, {"cost": {"utilisation": 1.5}},
                {"cost": {"utilisation": float("nan")}}, {"seeds": True}, {"iterations": 2.5},
                {"iterations": 10**20}, {"margin": True}):
        with pytest.raises(ValueError):
            BenchConfig.model_validate({**base, **bad})


def test_float_detection_of_field_types():
    assert _takes_floats(float) and _takes_floats(float | None) and _takes_floats(dict[str, float])
    assert _takes_floats(tuple[float, float]) and not _takes_floats(int) and not _takes_floats(dict[str, str])


# ---- resolution ---------------------------------------------------------------------------------------------------

def test_resolution_multiples_are_the_vae_factor_times_the_patch():
    """FLUX.1 and Qwen-Image: VAE f8, 2x2 packed latents; SD3.5: VAE f8, 2x2 patches; SANA: DC-AE f32, 1x1 patches;
    Wan: VAE f8, 1x2x2 patches
    (the same factors the adapters compute from the loaded files: tests/test_backbone_*.py `multiple of`)."""
    multiples = {s.key: s.resolution_multiple for s in backbone_specs()}
    known = {"embedded": None, "embedded_video": None, "flux1": 16, "sd35l": 16, "sd35m": 16, "sana": 32,
             "qwenimage": 16, "wan": 16, "wan14b": 16}  # Wan: VAE f8, 1x2x2 patches
    assert {key: multiples[key] for key in known} == known  # a backbone added later: the invariants below
    for spec in backbone_specs():
        if spec.image_tokens:  # a square of tokens per latent frame, each the multiple's pixels on a side
            assert (spec.defaults.resolution // spec.resolution_multiple) ** 2 * spec.latent_frames == spec.image_tokens
        assert {s.resolution_multiple for s in specs_of_kind(spec.kind)} == {spec.resolution_multiple}


@pytest.mark.parametrize("kind, resolution, message", [
    ("sd35", 1000, "model.resolution 1000 must be a multiple of 16 for model.kind sd35 .* e.g. 992 or 1008"),
    ("flux1", 520, "must be a multiple of 16 for model.kind flux1"),
    ("sana", 1008, "must be a multiple of 32 for model.kind sana .* e.g. 992 or 1024"),
    ("qwenimage", 8, r"must be a multiple of 16 .* e\.g\. 16$"),
    ("wan", 250, "must be a multiple of 16 for model.kind wan .* e.g. 240 or 256"),
    ("embedded", 33, "the embedded model's shipped weights generate 32 px images only; set model.resolution: null"),
    ("embedded", 64, "generate 32 px images only"),
])
def test_a_resolution_the_backbone_cannot_take_is_refused_at_config_time(kind, resolution, message):
    with pytest.raises(ConfigError, match=message):
        load_config(TINY, [f"model.kind={kind}", "model.path=/nowhere", f"model.resolution={resolution}"]
                    if kind != "embedded" else [f"model.resolution={resolution}"])


def test_a_fitting_resolution_is_taken():
    for kind, resolution in (("sd35", 1024), ("flux1", 64), ("sana", 64), ("qwenimage", 512)):
        cfg = load_config(TINY, [f"model.kind={kind}", "model.path=/nowhere", f"model.resolution={resolution}"])
        assert cfg.model.resolution == resolution
    assert load_config(TINY, ["model.resolution=32"]).model.resolution == 32
    assert load_config(TINY, ["model.resolution=null"]).model.resolution is None


def test_the_embedded_specs_resolution_is_its_shipped_weights():
    from solrl_core.models.backbones.embedded import PRETRAINED_DIR
    from solrl_core.models.embedded.model import PATCH_SIZE

    meta = json.loads((PRETRAINED_DIR / "solrl_embedded.json").read_text())
    spec = backbone_spec("embedded")
    assert spec.fixed_resolution and spec.defaults.resolution == meta["resolution"]
    assert meta["resolution"] % PATCH_SIZE == 0


def test_a_model_directory_of_another_resolution_refuses_the_setting_at_load(tmp_path, one_torch_thread):
    from solrl_core.models.embedded.model import build_model

    build_model(resolution=16).save(tmp_path / "m16")
    assert load_backbone(ModelConfig(path=str(tmp_path / "m16"))).resolution == 16  # null: the weights' own
    assert load_backbone(ModelConfig(path=str(tmp_path / "m16"), resolution=16)).resolution == 16
    with pytest.raises(SolrlError, match=r"model.resolution 32: the model at .*m16 generates 16 px images only; "
                                         r"set model.resolution: null \(or 16\)"):
        load_backbone(ModelConfig(path=str(tmp_path / "m16"), resolution=32))


# ---- prompts per iteration ----------------------------------------------------------------------------------------

def test_an_iteration_draws_no_more_prompts_than_the_set_has(tmp_path):
    path = tmp_path / "three.txt"
    path.write_text("a red circle\ntwo blue squares\na green triangle\n")
    cfg = load_config(TINY, [f"prompts.train={path}", "prompts.per_iteration=3"])
    assert check_train_prompts(cfg) == train_prompt_set(cfg) == ["a red circle", "two blue squares", "a green triangle"]
    cfg = load_config(TINY, [f"prompts.train={path}", "prompts.per_iteration=4"])
    with pytest.raises(SolrlError, match=r"^prompts.per_iteration is 4 but '.*three.txt' has 3 prompts: each "
                                         r"iteration draws distinct prompts; set prompts.per_iteration to at most 3"):
        check_train_prompts(cfg)


def test_the_split_is_named_when_it_makes_the_set_too_small(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}", "split": "train" if i < 2 else "test"}) + "\n"
                            for i in range(6)))
    cfg = load_config(TINY, [f"prompts.train={path}", "prompts.split=train", "prompts.per_iteration=3"])
    with pytest.raises(SolrlError, match=r"'.*p.jsonl' \(split 'train'\) has 2 prompts"):
        check_train_prompts(cfg)


def test_the_preflight_refuses_too_many_prompts_per_iteration_before_loading(tmp_path, monkeypatch):
    from solrl_core import run_preflight

    path = tmp_path / "one.txt"
    path.write_text("a red circle\n")
    monkeypatch.setattr(run_preflight, "load_backbone", lambda cfg: pytest.fail("loaded the model"))
    with pytest.raises(SolrlError, match=r"prompts.per_iteration is 2 but '.*one.txt' has 1 prompt: "):
        run_preflight.preflight(load_config(TINY, [f"prompts.train={path}"]))


def _get(cfg: RunConfig, key: str):
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def test_defaults_are_finite():
    for key, field in _float_fields():
        default = field.get_default(call_default_factory=True)
        assert default is None or math.isfinite(default), key


def test_the_loss_settings_that_moved_name_their_new_place():
    for key in ("beta", "adv_clip", "kl_weight"):
        with pytest.raises(ConfigError, match=rf"'train.{key}' is now 'objective.diffusionnft.{key}'"):
            load_config(TINY, [f"train.{key}=1"])
