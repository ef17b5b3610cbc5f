"""An editing model's iteration: edit prompts (a JSONL with source images) through explore, regenerate, the update and
the evaluation of each editing model's own preset on its tiny model, each pool keeping its prompts' sources, each
prompt's conditioning holding its own source's encoding; an edit prompt set given to a text-to-image model, and an
editing preset without its (unshipped) edit set, are refused in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import zarr
from PIL import Image
from safetensors.numpy import load_file

from cli_processes import tracking_set
from repo_paths import ROOT
from solrl.cli.main import main
from solrl_core.config.loading import load_config
from solrl_core.config.presets import model_rewards, preset_name, preset_path
from solrl_core.edit_sources import SOURCE_ARRAY, SOURCES_ATTR
from solrl_core.models.backbones.registry import load_backbone
from solrl_core.models.text_cache import TextCache, model_key
from solrl_core.rewards.registry import get_reward
from solrl_core.run.pool import read_table

PRESET = ROOT / "configs" / "presets" / "flux1_sol_rl_clipscore.yaml"  # a text-to-image model's
# each editing model's own preset, on its first reward (one that scores edits: solrl_core/config/presets.py)
EDITING = {model: preset_path(preset_name(model, "sol_rl", model_rewards(model)[0]))
           for model in ("flux1-kontext", "qwenimage-edit")}
INSTRUCTIONS = ["make it blue", "make it blue", "turn it into a square"]  # one instruction with two sources


@pytest.fixture(scope="module")
def edit_set(tmp_path_factory):
    """Three edit prompts, each with its own random source image (64 px, the tiny model's size), in a JSONL."""
    folder = tmp_path_factory.mktemp("edits")
    rng = np.random.default_rng(0)
    lines = []
    for i, instruction in enumerate(INSTRUCTIONS):
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(folder / f"source{i}.png")
        lines.append(json.dumps({"prompt": instruction, "images": f"source{i}.png"}))
    (folder / "edits.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _pool(path):
    return zarr.open_group(str(path), mode="r")


@pytest.mark.parametrize("model", EDITING)
def test_an_edit_iteration_carries_each_prompts_source_through_every_stage(run_cli, session_env, tmp_path, edit_set,
                                                                           one_torch_thread, model):
    tiny, run_dir, edits = tmp_path / "tiny", tmp_path / "run", edit_set / "edits.jsonl"
    assert main(["make-tiny", model, str(tiny)]) == 0
    # the preset's model, guidance and reward (clip_edit, trained and evaluated); the edit set is the test's;
    # Qwen-Image-Edit with Flow-Factory's CFG 4, whose unconditional branch sees each row's source
    cfg_scale = [] if model == "flux1-kontext" else ["guidance.rollout=4", "guidance.eval=4"]
    settings = [f"model.path={tiny}", f"prompts.train={edits}", f"eval.prompts={edits}", "eval.num_prompts=3",
                "eval.every=1", *cfg_scale]
    run_cli("train", str(EDITING[model]), "--iterations", "1", "--run-dir", str(run_dir), "--no-progress",
            *(arg for setting in settings for arg in ("--set", setting)), *tracking_set(session_env))
    sources = {f"{edit_set / f'source{i}.png'}": np.asarray(Image.open(edit_set / f"source{i}.png"))
               for i in range(len(INSTRUCTIONS))}

    explore = _pool(run_dir / "iter_0000" / "explore" / "pool.zarr")
    regen = _pool(run_dir / "iter_0000" / "regenerate" / "samples.zarr")
    evaluation = _pool(run_dir / "eval" / "step_0001" / "pool.zarr")
    for pool in (explore, regen, evaluation):
        paths = [tuple(s) for s in pool.attrs[SOURCES_ATTR]]
        assert len(paths) == len(pool.attrs["prompts"]) and all(len(p) == 1 for p in paths)
        for p, (path,) in enumerate(paths):  # each prompt's source beside its candidates, at the generated size
            assert INSTRUCTIONS[int(path[-5])] == pool.attrs["prompts"][p]
            np.testing.assert_array_equal(pool[SOURCE_ARRAY][p, 0], sources[path])
    assert regen.attrs[SOURCES_ATTR] == explore.attrs[SOURCES_ATTR]
    assert len(evaluation.attrs[SOURCES_ATTR]) == 3
    scale = 2.5 if model == "flux1-kontext" else 4.0  # Kontext's distilled guidance input, Qwen's CFG
    assert {pool.attrs["guidance"] for pool in (explore, regen, evaluation)} == {scale}

    # scored by a reward that reads the sources: the explore pool's CLIP edit scores are those of its rows' sources
    cfg = load_config(run_dir / "config.yaml")
    assert (cfg.model.kind, cfg.rewards, cfg.eval.rewards) == (model, {"clip_edit": 1.0}, {"clip_edit": 1.0})
    clip_edit = get_reward("clip_edit", cfg.reward_models)
    rows = np.asarray(explore["prompt_index"][:4])
    proxy = read_table(run_dir / "iter_0000" / "score_explore" / "rewards.zarr", ["reward"])[0]["reward"]
    np.testing.assert_allclose(proxy[:4], clip_edit(np.asarray(explore["image"][:4]), [
        explore.attrs["prompts"][i] for i in rows], sources=np.asarray(explore[SOURCE_ARRAY])[rows]), rtol=1e-5)
    evaluated = json.loads((run_dir / "eval" / "step_0001" / "metrics.json").read_text())["metrics"]
    assert np.isfinite(evaluated["clip_edit"]) and evaluated["reward"] == evaluated["clip_edit"]

    # the same instruction with two sources: two conditionings, each with its own source's latents
    cache = TextCache(run_dir / "text_cache", load_backbone(cfg.model), cfg.model)
    first, second = (load_file(str(cache.path("make it blue", (str(edit_set / f"source{i}.png"),)))) for i in (0, 1))
    assert not np.allclose(first["image_latents"], second["image_latents"])
    # Kontext's T5 and CLIP read the text alone; Qwen-Image-Edit's Qwen2.5-VL reads it with the source
    same_text = np.array_equal(first["encoder_hidden_states"], second["encoder_hidden_states"])
    assert same_text == (model == "flux1-kontext")
    assert (run_dir / "text_cache" / model_key(cfg.model)).is_dir()
    # Qwen-Image-Edit's unconditional branch: the empty prompt encoded with each source (none bare)
    if model == "qwenimage-edit":
        for i in range(len(INSTRUCTIONS)):
            assert cache.path("", (str(edit_set / f"source{i}.png"),)).is_file()
        assert not cache.path("").is_file()

    after = load_file(str(run_dir / "iter_0000" / "update" / "checkpoint" / "adapters.safetensors"))
    init = load_file(str(run_dir / "init" / "adapters.safetensors"))
    assert any(not np.array_equal(after[k], init[k]) for k in init), "the update changed nothing"
    assert torch.isfinite(torch.from_numpy(np.stack([after[k].sum() for k in after]))).all()


@pytest.mark.parametrize("settings, needle", [
    (["prompts.train={edits}"], "prompts.train is an edit prompt set (its lines have source \"images\") but model.kind "
                                "flux1 does not edit images"),
    (["rewards={{clip_edit: 1.0}}"], "reward clip_edit scores edits, but prompts.train has no source images"),
])
def test_edits_asked_of_what_cannot_do_them_are_refused_in_one_line(tmp_path, edit_set, capsys, settings, needle):
    tiny = tmp_path / "tiny"
    assert main(["make-tiny", "flux1", str(tiny)]) == 0
    capsys.readouterr()
    sets = [s.format(edits=edit_set / "edits.jsonl") for s in [f"model.path={tiny}", *settings]]
    code = main(["train", str(PRESET), "--iterations", "1", "--run-dir", str(tmp_path / "run"),
                 *(arg for setting in sets for arg in ("--set", setting))])  # refused before any flow starts
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and error.startswith(f"solrl: error: {needle}"), error
    assert not (tmp_path / "run" / "iter_0000").exists()


def test_an_editing_preset_without_its_edit_set_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    """No edit prompt set ships: `solrl train` on an editing preset refuses the missing file before any flow starts,
    saying how to write one."""
    tiny = tmp_path / "tiny"
    assert main(["make-tiny", "flux1-kontext", str(tiny)]) == 0
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    code = main(["train", EDITING["flux1-kontext"].stem, "--iterations", "1", "--run-dir", str(tmp_path / "run"),
                 "--set", f"model.path={tiny}", "--set", "prompts.train=data/edits/train.jsonl"])  # the preset's file
    error = capsys.readouterr().err.strip().splitlines()[-1]  # the error's one line
    assert code == 2 and error.endswith("eval.prompts=FILE)"), error
    assert error.startswith("solrl: error: prompts.train: file not found: data/edits/train.jsonl (the edit prompt "
                            "set of the editing models' presets is not shipped"), error
    assert not (tmp_path / "run" / "iter_0000").exists()
