"""The presets: names composing the parts and the backbone specs, every one valid, carrying the official values of
docs/method.md (or, for a model without an official setting, the values its spec and part name a source for), and
described by what they are."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from solrl_core.config import presets
from solrl_core.config.loading import load_config
from solrl_core.config.packaged import CONFIGS_DIR
from solrl_core.config.schema import load_yaml
from solrl_core.models.backbones.registry import backbone_spec
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.lab.quant_coverage import SANA_NATIVE_TO_DIFFUSERS

# docs/method.md, "Official settings per backbone" (SD3.5-M has none: SD3.5-L's, min width = its width 1536 and
# micro-batch 8 are this project's choices, stated in configs/parts/models/sd35m.yaml).
SD35_SKIP = ["pos_embed", "context_embedder", "time_text_embed", "norm_out", "norm1", "ff_context"]
SANA_NATIVE_SKIP = ["t_embedder", "t_block", "cfg_embedder", "y_embedder", "x_embedder", "final_layer",
                    "logvar_linear", "attn.qkv"]
OFFICIAL_MODEL = {
    "flux1": dict(kind="flux1", resolution=512, sampler="dpmpp_2m", micro_batch=12, timestep_fraction=0.4,
                  skip=["x_embedder", "context_embedder", "time_text_embed", "norm_out"], min_width=1000,
                  eval_steps=28),
    "sd35l": dict(kind="sd35", resolution=1024, sampler="dpmpp_2m", micro_batch=4, timestep_fraction=0.6,
                  skip=SD35_SKIP, min_width=2432, eval_steps=40),
    "sd35m": dict(kind="sd35", resolution=1024, sampler="dpmpp_2m", micro_batch=8, timestep_fraction=0.6,
                  skip=SD35_SKIP, min_width=1536, eval_steps=40),
    "sana": dict(kind="sana", resolution=1024, sampler="euler", micro_batch=16, timestep_fraction=0.6,
                 skip=[d for n in SANA_NATIVE_SKIP for d in SANA_NATIVE_TO_DIFFUSERS[n]], min_width=2240,
                 eval_steps=40),
    # Qwen-Image has no official setting: peers' published values where they agree (512 px, eval 50 steps as
    # flow_grpo), FLUX.1's quantization rule and timestep fraction (configs/parts/models/qwenimage.yaml)
    "qwenimage": dict(kind="qwenimage", resolution=512, sampler="euler", micro_batch=8, timestep_fraction=0.4,
                      skip=["img_in", "txt_in", "time_text_embed", "norm_out"], min_width=1000, eval_steps=50),
    # Wan 2.1 (video) has no official setting: Flow-Factory's Wan 2.1 GRPO recipe (256 px, 28 evaluation steps) and
    # SD3.5-L's kind of quantization rule (configs/parts/models/wan.yaml)
    "wan": dict(kind="wan", resolution=256, sampler="euler", micro_batch=8, timestep_fraction=0.6,
                skip=["condition_embedder", "proj_out"], min_width=1536, eval_steps=28),
    # the 14B: the 1.3B's, but min width = its hidden width 5120 and SD3.5-L's micro-batch (configs/parts/models/
    # wan14b.yaml)
    "wan14b": dict(kind="wan", resolution=256, sampler="euler", micro_batch=4, timestep_fraction=0.6,
                   skip=["condition_embedder", "proj_out"], min_width=5120, eval_steps=28),
    # Wan2.2-T2V-A14B (two experts): Flow-Factory's Wan2.2 LoRA GRPO recipe (480 px, 28 evaluation steps), the 14B's
    # quantization rule, a micro-batch of 2 (configs/parts/models/wan22.yaml)
    "wan22": dict(kind="wan22", resolution=480, sampler="euler", micro_batch=2, timestep_fraction=0.6,
                  skip=["condition_embedder", "proj_out"], min_width=5120, eval_steps=28),
}
# Text length and gradient-norm clip as the reference runs each model (NVlabs/Sana): TEXT_ENCODER_MAX_SEQ_LEN of
# train_scripts/sol_rl/train_{flux1,sd3,sana}.py (T5 for FLUX.1 / SD3.5, Gemma for SANA) and train.max_grad_norm of
# configs/sol_rl/{flux1,sd3,sana}.py, where sd3.py keeps configs/sol_rl/base.py's 0.002. SD3.5-M: SD3.5-L's.
REFERENCE_TRAINING = {"flux1": (128, 1.0), "sd35l": (128, 0.002), "sd35m": (128, 0.002), "sana": (300, 1.0),
                      "qwenimage": (256, 1.0),  # Qwen-Image (no reference): verl-omni's 256 tokens, the peers' 1.0
                      "wan": (512, 1.0),  # Wan: WanPipeline's / Flow-Factory's 512 UMT5 tokens, Flow-Factory's 1.0
                      "wan14b": (512, 1.0), "wan22": (512, 1.0)}
# LoRA (rank, alpha): the shared recipe's (docs/method.md, "One RL iteration"), but Qwen-Image's, which follows the
# peers' published Qwen-Image configs (Flow-Factory, verl-omni: rank 64 / alpha 128)
LORA_RANK_ALPHA = {"flux1": (32, 64), "sd35l": (32, 64), "sd35m": (32, 64), "sana": (32, 64), "qwenimage": (64, 128),
                   "wan": (64, 128), "wan14b": (64, 128), "wan22": (64, 128)}  # Wan: Flow-Factory's GRPO recipes
# docs/method.md, "The four families": (explore precision, explore steps, N, select mode, K, regenerate, its steps)
OFFICIAL_FAMILY = {
    "baseline": ("fp32", 10, 24, "all", 24, False),
    "naive_scaling": ("fp32", 10, 96, "best_worst", 24, False),
    "naive_quant": ("auto", 10, 96, "best_worst", 24, False),
    "sol_rl": ("auto", 6, 96, "best_worst", 24, True),
}
ALL_REWARDS_ORDER = ("pickscore", "clipscore", "hpsv2", "imagereward")  # a text-to-image model's, the registry's order
ALL_REWARDS = set(ALL_REWARDS_ORDER)
# Flow-Factory's Wan 2.1 and Wan2.2 (guidance_scale 4.0) GRPO recipes; the others' official 1.0
ROLLOUT_GUIDANCE = {"wan": 5.0, "wan14b": 5.0, "wan22": 4.0}


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def test_presets_are_names_that_compose_the_parts():
    every = presets.presets()
    assert presets.PRESET_OBJECTIVES == ("flow_grpo", "awm")
    assert set(OFFICIAL_MODEL) <= set(presets.MODELS)  # the registry's models: these, and any added later
    # each model with every family and each reward of its kind (`model_rewards`), under each objective
    per_objective = len(presets.FAMILIES) * sum(len(presets.model_rewards(m)) for m in presets.MODELS)
    assert len(every) == per_objective * 3 and per_objective >= 8 * 4 * 4  # DiffusionNFT's, Flow-GRPO's, AWM's
    assert set(every) == {presets.preset_name(m, f, r, o) for o in (None, *presets.PRESET_OBJECTIVES)
                          for m in presets.MODELS for f in presets.FAMILIES for r in presets.model_rewards(m)}
    assert not (CONFIGS_DIR / "presets").exists()  # no generated files: a name resolves to its pieces when read
    parts = CONFIGS_DIR / "parts"
    pieces = every["sd35l_naive_quant_imagereward"].pieces()
    spec = backbone_spec("sd35l")
    assert pieces == [parts / "official.yaml", {"model": {"kind": "sd35", "resolution": 1024, "sampler": "dpmpp_2m",
                                                          "max_sequence_length": 128},
                                                "quant": {"skip_names": SD35_SKIP, "min_width": 2432},
                                                "train": {"lora_targets": None, "timestep_fraction": 0.6,
                                                          "micro_batch": 4, "optimizer": {"grad_clip": 0.002}}},
                      spec.part, parts / "families" / "naive_quant.yaml", parts / "rewards" / "imagereward.yaml"]


def test_a_model_part_holds_only_what_its_spec_does_not():
    """The spec is the one place of a model's values: its part sets none of them (the presets take them from it)."""
    for model, spec in presets.MODEL_SPECS.items():
        part = load_yaml(spec.part.read_text())
        for dotted in spec.part_values():
            node = part
            for key in dotted.split("."):
                node = node.get(key) if isinstance(node, dict) else None
            assert node is None, f"{spec.part.name} sets {dotted}, which the spec holds"


def test_a_model_part_per_family_wins_over_the_family(tmp_path, monkeypatch):
    """A few-step model sets its own step counts: parts/models/<model>/<family>.yaml comes after the family's part."""
    parts = tmp_path / "parts"
    shutil.copytree(CONFIGS_DIR / "parts", parts)
    (parts / "models" / "sd35m").mkdir()
    (parts / "models" / "sd35m" / "sol_rl.yaml").write_text("explore: {steps: 4}\nregenerate: {steps: 8}\n")
    monkeypatch.setattr(presets, "PARTS_DIR", parts)
    monkeypatch.setattr(presets, "OBJECTIVES_DIR", parts / "objectives")
    turbo = load_config("sd35m_sol_rl_pickscore")
    assert (turbo.explore.steps, turbo.regenerate.steps) == (4, 8)
    assert (turbo.explore.seeds_per_prompt, turbo.select.k) == (96, 24)  # the rest of the family's part stays
    other = load_config("sd35l_sol_rl_pickscore")  # another model, and another family of this one: the family's
    assert (other.explore.steps, other.regenerate.steps) == (6, 10)
    assert load_config("sd35m_naive_quant_pickscore").explore.steps == 10
    assert load_config("awm/sd35m_sol_rl_pickscore").explore.steps == 4  # under every objective


def test_an_objectives_presets_add_its_part_and_the_models_own_values_where_a_peer_has_them():
    parts = CONFIGS_DIR / "parts"
    pieces = presets.presets()["flow_grpo/flux1_sol_rl_pickscore"].pieces()
    assert pieces[-2:] == [parts / "objectives" / "flow_grpo.yaml", parts / "objectives" / "flow_grpo" / "flux1.yaml"]
    described = presets.describe("flow_grpo/flux1_sol_rl_pickscore")
    header = " ".join(line.removeprefix("# ") for line in described.splitlines())
    assert "Objective Flow-GRPO instead of DiffusionNFT" in header and "objectives/flow_grpo/flux1.yaml" in header
    # Flow-Factory's FLUX.1 Flow-GRPO-Fast: one SDE step drawn from [1, 2, 3], noise 0.7, no KL
    grpo = load_config("flow_grpo/flux1_sol_rl_pickscore")
    g = grpo.objective.flow_grpo
    assert grpo.name == "flow_grpo_flux1_sol_rl_pickscore"
    assert (grpo.objective.name, g.window_start, g.window_size, g.noise_level, g.kl_weight) == (
        "flow_grpo", [1, 2, 3], 1, 0.7, 0.0)
    # a model no peer publishes: the defaults (flow_grpo pickscore_sd3), the model's and family's values unchanged
    sana = load_config("flow_grpo/sana_naive_quant_hpsv2")
    official = load_config("sana_naive_quant_hpsv2")
    assert sana.objective.flow_grpo == type(g)() and sana.name == "flow_grpo_sana_naive_quant_hpsv2"
    assert sana.model_dump(exclude={"objective", "name"}) == official.model_dump(exclude={"objective", "name"})
    awm = load_config("configs/presets/awm/flux1_baseline_pickscore.yaml").objective  # the older path form
    assert (awm.name, awm.awm.times_per_sample, awm.awm.timestep_fraction, awm.awm.old_kl_weight) == ("awm", 4, 0.7,
                                                                                                      0.1)
    assert load_config("awm/sd35m_sol_rl_pickscore").objective.awm.times_per_sample == 6


def test_a_config_of_your_own_extends_a_preset_by_name(tmp_path):
    mine = write(tmp_path, "mine.yaml", "extends: flux1_sol_rl_pickscore\niterations: 7\n")
    cfg = load_config(mine)
    assert cfg.iterations == 7 and cfg.name == "mine"  # named after its own file, as before
    assert cfg.model_dump(exclude={"iterations", "name"}) == load_config("flux1_sol_rl_pickscore").model_dump(
        exclude={"iterations", "name"})
    grpo = load_config(write(tmp_path, "g.yaml", "extends: flow_grpo/flux1_sol_rl_pickscore.yaml\n"))
    assert grpo.objective.name == "flow_grpo"


def test_each_header_says_what_the_settings_are():
    """Official settings only where docs/method.md has them; SD3.5-M and Qwen-Image say what theirs are instead."""
    official = "official settings (docs/method.md)."
    for model in OFFICIAL_MODEL:
        for family in presets.FAMILIES:
            for reward in presets.model_rewards(model):
                text = presets.describe(f"{model}_{family}_{reward}")
                header = " ".join(line.removeprefix("# ") for line in text.splitlines() if line.startswith("# "))
                title = f"{presets.TITLES[model]}, {family}, trained on {presets.TITLES[reward]}: "
                assert header.startswith(title)
                assert all(len(line) <= presets.HEADER_WIDTH for line in text.splitlines() if line.startswith("#"))
                if model in ("sd35m", "qwenimage", "wan", "wan14b", "wan22"):
                    assert official not in header
                    assert "no official Sol-RL setting" in header
                    assert f"solrl_core/models/backbones/specs/{model}.py" in header
                else:
                    assert header.startswith(title + official)
                if model == "qwenimage":
                    assert "settings from peers' published Qwen-Image configs and choices made here" in header


@pytest.mark.parametrize("model", OFFICIAL_MODEL)  # a model added later: tests/unit/models/backbones/test_backbone_specs.py
def test_every_preset_validates_with_the_official_values(model):
    want = OFFICIAL_MODEL[model]
    assert presets.model_rewards(model) == tuple(ALL_REWARDS_ORDER)
    for family in presets.FAMILIES:
        for reward in presets.model_rewards(model):
            name = f"{model}_{family}_{reward}"
            cfg = load_config(name)
            assert cfg.name == name and cfg.family == family
            # per model
            assert (cfg.model.kind, cfg.model.resolution, cfg.model.sampler) == (
                want["kind"], want["resolution"], want["sampler"])
            assert (cfg.model.device, cfg.model.dtype, cfg.model.allow_downloads) == ("cuda", "bfloat16", False)
            assert cfg.train.micro_batch == want["micro_batch"]
            assert cfg.train.timestep_fraction == want["timestep_fraction"]
            assert cfg.quant.skip_names == want["skip"] and cfg.quant.min_width == want["min_width"]
            assert cfg.eval.steps == want["eval_steps"]
            assert (cfg.model.max_sequence_length, cfg.train.optimizer.grad_clip) == REFERENCE_TRAINING[model]
            assert cfg.train.lora_targets is None  # the backbone's default (the official list)
            # per family
            precision, steps, n, mode, k, regen = OFFICIAL_FAMILY[family]
            assert (cfg.explore.precision, cfg.explore.steps, cfg.explore.seeds_per_prompt) == (precision, steps, n)
            assert (cfg.select.mode, cfg.select.k, cfg.regenerate.enabled) == (mode, k, regen)
            assert cfg.regenerate.steps == 10
            # per reward: trained alone with weight 1, evaluated on all four (the trained one is the total)
            assert cfg.rewards == {reward: 1.0}
            assert set(cfg.eval.rewards) == ALL_REWARDS
            assert {r: w for r, w in cfg.eval.rewards.items() if w} == {reward: 1.0}
            # shared (docs/method.md, "One RL iteration")
            assert cfg.prompts.per_iteration == 48
            assert (cfg.train.lora_rank, cfg.train.lora_alpha) == LORA_RANK_ALPHA[model]
            nft = cfg.objective.diffusionnft
            assert (cfg.objective.name, nft.beta, nft.adv_clip) == ("diffusionnft", 1, 5)
            assert (nft.kl_weight, cfg.train.optimizer_steps) == (1e-4, 1)
            assert (cfg.train.processes, cfg.train.dist_backend) == (8, "nccl")  # micro-batch per GPU, 8 GPUs
            opt = cfg.train.optimizer
            assert (opt.lr, opt.betas, opt.weight_decay, opt.eps) == (3e-4, (0.9, 0.999), 1e-4, 1e-8)
            assert (cfg.train.old_eta_rate, cfg.train.old_eta_max, cfg.train.ema_max_decay) == (0.001, 0.5, 0.9)
            assert cfg.eval.every == 20
            # no CFG in rollouts (Wan: Flow-Factory's CFG 5.0); the update without CFG
            assert (cfg.guidance.rollout, cfg.guidance.train) == (ROLLOUT_GUIDANCE.get(model, 1.0), 1.0)
            # Wan2.2 A14B's low-noise expert: Flow-Factory's guidance_scale_2 3.0; the others have one transformer
            assert cfg.model.low_noise_guidance == (3.0 if model == "wan22" else None)
            assert cfg.train.experts is None  # wan22: both experts, the spec's default (Flow-Factory's)
            assert (cfg.quant.weight_format, cfg.quant.act_format) == ("nvfp4_2d", "nvfp4")
            assert cfg.prompts.train == "data/pickscore/train.txt" and cfg.eval.prompts == "data/pickscore/test.txt"


def test_list_extends_merges_in_order_and_the_file_wins(tmp_path):
    write(tmp_path, "base.yaml", "explore: {steps: 3, seeds_per_prompt: 8, batch_size: 4}\nselect: {k: 2}\n")
    write(tmp_path, "a.yaml", "extends: base.yaml\nexplore: {steps: 4}\ntrain: {lora_rank: 8, micro_batch: 2}\n")
    write(tmp_path, "b.yaml", "extends: base.yaml\nexplore: {steps: 5}\ntrain: {lora_rank: 16}\n")
    child = write(tmp_path, "child.yaml", "extends: [a.yaml, b.yaml]\nexplore: {batch_size: 6}\n")
    cfg = load_config(child)  # base.yaml reached twice (a diamond) is not a cycle
    assert cfg.explore.steps == 5  # b after a
    assert (cfg.train.lora_rank, cfg.train.micro_batch) == (16, 2)  # key by key: a's micro_batch survives
    assert (cfg.explore.seeds_per_prompt, cfg.select.k, cfg.explore.batch_size) == (8, 2, 6)  # the file itself wins
    flipped = write(tmp_path, "flipped.yaml", "extends: [b.yaml, a.yaml]\n")
    assert load_config(flipped).explore.steps == 4
    assert load_config(child, ["explore.steps=7"]).explore.steps == 7  # --set over everything
    write(tmp_path, "loop.yaml", "extends: [base.yaml, child2.yaml]\n")
    write(tmp_path, "child2.yaml", "extends: [loop.yaml]\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "loop.yaml")
    with pytest.raises(ConfigError, match="'extends' must be a file name or a list"):
        load_config(write(tmp_path, "bad.yaml", "extends: {a: 1}\n"))
    with pytest.raises(ConfigError, match="not found"):
        load_config(write(tmp_path, "missing.yaml", "extends: [base.yaml, nope.yaml]\n"))


def test_missing_official_prompt_set_says_where_to_get_it(tmp_path, monkeypatch):
    from solrl_core.prompts import train_prompt_set

    monkeypatch.chdir(tmp_path)
    cfg = load_config("sana_sol_rl_pickscore")
    with pytest.raises(SolrlError) as err:
        train_prompt_set(cfg)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("prompts.train: file not found: data/pickscore/train.txt")
    assert "not shipped" in message and "data/pickscore/" in message
    prompts = tmp_path / "data" / "pickscore"
    prompts.mkdir(parents=True)
    (prompts / "train.txt").write_text("a cat\na dog\n")
    assert train_prompt_set(cfg) == ["a cat", "a dog"]
    # another missing file gets no pickscore hint
    other = load_config("sana_sol_rl_pickscore", ["prompts.train=mine.txt"])
    with pytest.raises(SolrlError, match=r"^prompts.train: file not found: mine.txt$"):
        train_prompt_set(other)


# The editing models' presets (configs/parts/models/flux1-kontext.yaml, qwenimage-edit.yaml; no official setting): the
# spec's values of the model each is built on (FLUX.1-dev's, Qwen-Image's with 512 text tokens), Flow-Factory's
# guidance 2.5 for Kontext (its distilled guidance input) and none for Qwen-Image-Edit, the pipelines' evaluation
# steps, and an edit prompt set the user writes (data/edits/, not shipped).
EDITING_MODEL = {
    "flux1-kontext": dict(path="black-forest-labs/FLUX.1-Kontext-dev", text=128, lora=(32, 64), guidance=2.5,
                          eval_steps=28),
    "qwenimage-edit": dict(path="Qwen/Qwen-Image-Edit", text=512, lora=(64, 128), guidance=1.0, eval_steps=50),
}
EDIT_SETS = ("data/edits/train.jsonl", "data/edits/test.jsonl")


def test_editing_models_train_on_the_rewards_that_score_edits_and_the_others_on_the_rest():
    """The pairing is read from the registries (a spec's `edits`, a reward class's `edits`): a reward that reads
    sources has none in a text-to-image prompt set, and an edit prompt's instruction is no caption."""
    from solrl_core.rewards.registry import REWARDS as REGISTERED

    editing = {m for m, spec in presets.MODEL_SPECS.items() if spec.edits}
    edit_rewards = {r for r in presets.REWARDS if REGISTERED[r].edits}
    assert set(EDITING_MODEL) <= editing and editing.isdisjoint(OFFICIAL_MODEL)
    assert "clip_edit" in edit_rewards and ALL_REWARDS <= set(presets.REWARDS) - edit_rewards
    for preset in presets.presets().values():
        assert REGISTERED[preset.reward].edits == presets.MODEL_SPECS[preset.model].edits, preset.name
    for model in presets.MODELS:  # each model with every reward of its kind
        trained = {p.reward for p in presets.presets().values() if p.model == model}
        assert trained == (edit_rewards if model in editing else set(presets.REWARDS) - edit_rewards) != set()
        assert presets.model_rewards(model) == tuple(r for r in presets.REWARDS if r in trained)


@pytest.mark.parametrize("model", EDITING_MODEL)
def test_an_editing_preset_validates_and_writes_with_its_values(model, tmp_path):
    from solrl.cli.commands.presets import write_preset

    want, spec = EDITING_MODEL[model], backbone_spec(model)
    for objective in (None, *presets.PRESET_OBJECTIVES):
        for family in presets.FAMILIES:
            for reward in presets.model_rewards(model):
                name = presets.preset_name(model, family, reward, objective)
                cfg = load_config(name)
                assert (cfg.model.kind, cfg.model.resolution, cfg.model.path) == (spec.kind, 512, want["path"])
                assert (cfg.model.max_sequence_length, cfg.train.lora_rank, cfg.train.lora_alpha) == (
                    want["text"], *want["lora"])
                assert (cfg.guidance.rollout, cfg.guidance.train, cfg.guidance.eval) == (want["guidance"],) * 3
                assert cfg.eval.steps == want["eval_steps"] and cfg.train.optimizer.lr == 3e-4
                assert cfg.rewards == cfg.eval.rewards == {reward: 1.0}  # trained and evaluated on the edit reward
                assert (cfg.prompts.train, cfg.eval.prompts) == EDIT_SETS
                precision, steps, n, mode, k, regen = OFFICIAL_FAMILY[family]
                assert (cfg.explore.precision, cfg.explore.seeds_per_prompt, cfg.select.k) == (precision, n, k)
    name = presets.preset_name(model, "sol_rl", presets.model_rewards(model)[0])
    written = write_preset(name, tmp_path / "mine.yaml", [])  # `solrl presets --write NAME FILE`
    text = written.read_text()
    assert text.startswith(f"# {presets.TITLES[model]}, sol_rl, trained on {presets.TITLES['clip_edit']}: ")
    assert f"configs/parts/models/{model}.yaml" in " ".join(line.removeprefix("# ") for line in text.splitlines())
    assert load_config(written).model_dump(exclude={"name"}) == load_config(name).model_dump(exclude={"name"})


def test_an_editing_presets_edit_set_is_refused_in_one_line_until_written_as_the_docs_say(tmp_path, monkeypatch):
    """No edit prompt set ships: the missing file says how to write one; written so (docs/editing.md), the preset's
    prompts, sources, model and reward go together."""
    import numpy as np
    from PIL import Image

    from solrl_core.prompts import check_train_prompts
    from solrl_core.run_preflight import check_edit_prompts

    monkeypatch.chdir(tmp_path)
    cfg = load_config("flux1-kontext_sol_rl_clip_edit", ["prompts.per_iteration=2"])
    with pytest.raises(SolrlError) as err:
        check_train_prompts(cfg)
    message = str(err.value)
    assert "\n" not in message and message.startswith("prompts.train: file not found: data/edits/train.jsonl (")
    assert "not shipped" in message and '{"prompt": INSTRUCTION, "images": SOURCE}' in message
    folder = tmp_path / "data" / "edits"
    folder.mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(folder / "car.png")
    for name in ("train.jsonl", "test.jsonl"):
        (folder / name).write_text('{"prompt": "make the car red", "images": "car.png"}\n'
                                   '{"prompt": "remove the car", "images": ["car.png"]}\n')
    assert check_train_prompts(cfg) == ["make the car red", "remove the car"]
    check_edit_prompts(cfg)  # an edit set, an editing model, a reward that scores edits: nothing to refuse
    (tmp_path / "captions.txt").write_text("a red car\na blue car\n")  # a text-to-image set: no sources
    captions = load_config("flux1-kontext_sol_rl_clip_edit", ["prompts.train=captions.txt"])
    with pytest.raises(SolrlError, match="^reward clip_edit scores edits, but prompts.train has no source images"):
        check_edit_prompts(captions)


# The official LoRA targets (docs/method.md); SANA's native attn.qkv / attn.proj / cross_attn.q_linear / kv_linear /
# proj in diffusers' module names (attn1 = self-attention, attn2 = cross-attention).
OFFICIAL_LORA = {
    "flux1": ["to_q", "to_k", "to_v", "to_out.0"],
    "sd35l": ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"],
    "sana": ["attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0",
             "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0"],
}
OFFICIAL_LORA["sd35m"] = OFFICIAL_LORA["sd35l"]
# no official setting: verl-omni's 12 targets (the attention projections of both streams and both MLP Linears of each)
OFFICIAL_LORA["qwenimage"] = [*OFFICIAL_LORA["sd35l"], "img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj",
                              "txt_mlp.net.2"]
# no official setting: Flow-Factory's Wan targets (both attentions and the feed-forward of each block)
OFFICIAL_LORA["wan"] = OFFICIAL_LORA["wan14b"] = OFFICIAL_LORA["wan22"] = [*OFFICIAL_LORA["sana"], "ffn.net.0.proj",
                                                                          "ffn.net.2"]


@pytest.mark.parametrize("model", REFERENCE_TRAINING)
def test_the_backbone_defaults_are_the_reference_text_length_and_clip(model):
    """A run config that leaves them null gets the same values as the presets."""
    from solrl_core.models.backbones.registry import adapter_class

    defaults = adapter_class(OFFICIAL_MODEL[model]["kind"]).defaults
    assert (defaults.max_sequence_length, defaults.grad_clip) == REFERENCE_TRAINING[model]


@pytest.mark.parametrize("model", OFFICIAL_LORA)
def test_null_lora_targets_mean_the_official_ones(model):
    from solrl_core.models.backbones.registry import adapter_class
    from solrl_core.planner.memory import lora_targets

    cfg = load_config(f"{model}_sol_rl_pickscore")
    assert cfg.train.lora_targets is None
    assert adapter_class(cfg.model.kind).defaults.lora_targets == OFFICIAL_LORA[model]
    assert list(lora_targets(model)) == OFFICIAL_LORA[model]  # what the memory estimate counts
