"""The issue's acceptance check, per real backbone: `solrl make-tiny MODEL DIR`, then one whole sol_rl iteration of
the official preset through the CLI (`--set model.path=DIR`), with every stage's artifact checked."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from cli_processes import tracking_set
from repo_paths import ROOT
from solrl.cli.main import main
from solrl_core.models.backbones.registry import backbone_spec, load_backbone
from solrl_core.models.backbones.tiny import tiny_models
from solrl_core.config import presets
from solrl_core.config.loading import load_config
from solrl_core.run.pool import read_table
from solrl_core.run.rundir import STAGES
from solrl_core.models.sampler import schedule_sigmas

# every backbone with a tiny maker and presets (solrl_core/models/backbones/specs/), the rewards taken in turn so that
# every tiny reward checkpoint is exercised; not the editing models (a spec's `edits`): their presets train on an edit
# prompt set, which the tiny model's prompts.txt is not (their preset's iteration: tests/e2e/test_edit_iteration.py)
CASES = list(zip([m for m in tiny_models() if m in presets.MODELS and not presets.MODEL_SPECS[m].edits],
                 itertools.cycle(["pickscore", "hpsv2", "clipscore", "imagereward"])))


def table(run_dir, stage: str, name: str, cols=None):
    return read_table(run_dir / "iter_0000" / stage / name, cols)


@pytest.mark.parametrize("model,reward", CASES)
def test_one_sol_rl_iteration_of_the_official_preset_on_a_tiny_model(run_cli, session_env, tmp_path, model, reward,
                                                                    one_torch_thread, capsys):
    tiny, run_dir = tmp_path / f"tiny-{model}", tmp_path / "run"
    assert main(["make-tiny", model, str(tiny)]) == 0  # in process: the CLI's code path without a second start-up
    preset = ROOT / "configs" / "presets" / f"{model}_sol_rl_{reward}.yaml"
    proc = run_cli("train", str(preset), "--iterations", "1", "--set", f"model.path={tiny}", "--run-dir",
                   str(run_dir), "--no-progress", *tracking_set(session_env))
    assert "tiny model at" in proc.stderr

    cfg = load_config(run_dir / "config.yaml")  # the frozen config: the preset with the tiny overrides
    assert (cfg.model.path, cfg.family, cfg.rewards) == (str(tiny), "sol_rl", {reward: 1.0})
    assert cfg.model.gradient_checkpointing  # the official value, kept by the tiny overrides
    capsys.readouterr()
    assert main(["status", "--run-dir", str(run_dir), "--json"]) == 0  # in process: no second start-up
    status = json.loads(capsys.readouterr().out)
    assert [it["stages"] for it in status["iterations"]] == [{s: "complete" for s in STAGES}]

    p, n, k = cfg.prompts.per_iteration, cfg.explore.seeds_per_prompt, cfg.select.k
    pool, attrs = table(run_dir, "explore", "pool.zarr", ["prompt_index", "seed", "image"])
    assert attrs["committed"] == p * n and attrs["steps"] == 6 and attrs["precision"] == "nvfp4_emulated"
    backbone = load_backbone(cfg.model)  # its schedule is checked against the reference's in test_backbone_<model>
    assert attrs["sigmas"] == pytest.approx(schedule_sigmas(backbone, 6), abs=1e-7)
    assert attrs["sampler"] == load_config(preset).model.sampler  # the backbone's official solver
    assert np.bincount(pool["prompt_index"]).tolist() == [n] * p
    frames = (cfg.model.frames,) if cfg.model.frames else ()  # a video backbone's candidates are videos
    assert pool["image"].shape == (p * n, *frames, cfg.model.resolution, cfg.model.resolution, 3)

    proxy = table(run_dir, "score_explore", "rewards.zarr", ["reward"])[0]["reward"]
    assert np.isfinite(proxy).all() and np.ptp(proxy) > 0
    chosen = table(run_dir, "select", "selection.zarr", ["candidate_index"])[0]["candidate_index"]
    assert len(chosen) == p * k
    for prompt in range(p):
        members = np.flatnonzero(pool["prompt_index"] == prompt)
        ranked = members[np.argsort(proxy[members], kind="stable")]
        best_worst = set(ranked[: k // 2].tolist()) | set(ranked[-(k // 2):].tolist())
        assert {c for c in chosen.tolist() if pool["prompt_index"][c] == prompt} == best_worst

    regen, rattrs = table(run_dir, "regenerate", "samples.zarr", ["candidate_index", "seed", "latent"])
    np.testing.assert_array_equal(regen["candidate_index"], chosen)
    np.testing.assert_array_equal(regen["seed"], pool["seed"][chosen])  # same initial noise, full precision
    assert rattrs["regenerated"] and rattrs["steps"] == 10 and rattrs["precision"] == "fp32"
    assert rattrs["sigmas"] == pytest.approx(schedule_sigmas(backbone, 10), abs=1e-7)  # the update's times
    final = table(run_dir, "score_final", "rewards.zarr", ["reward", "proxy_reward"])[0]
    np.testing.assert_allclose(final["proxy_reward"], proxy[chosen])
    assert np.isfinite(final["reward"]).all()

    init = load_file(str(run_dir / "init" / "adapters.safetensors"))
    after = load_file(str(run_dir / "iter_0000" / "update" / "checkpoint" / "adapters.safetensors"))
    assert set(init) == set(after) and any(key.startswith("default.") for key in after)
    assert all(np.isfinite(value).all() for value in after.values())
    changed = [key for key in init if key.startswith("default.") and not np.array_equal(init[key], after[key])]
    assert changed
    experts = backbone_spec(model).trained_experts  # a model of experts: θ, θ_old and the EMA of each trained one
    if experts:
        ema = load_file(str(run_dir / "iter_0000" / "update" / "checkpoint" / "ema.safetensors"))
        for prefix, keys in (("default.", after), ("old.", after), ("", ema)):
            assert {k.removeprefix(prefix).split(".")[0] for k in keys if k.startswith(prefix)} == set(experts)
        assert {key.split(".")[1] for key in changed} == set(experts)  # the update moved every trained expert
    state = json.loads((run_dir / "iter_0000" / "update" / "checkpoint" / "state.json").read_text())
    assert state["step"] == 1
    update = json.loads((run_dir / "iter_0000" / "manifests" / "update.json").read_text())["summary"]
    assert update["grad_clip"] == cfg.train.optimizer.grad_clip == backbone.defaults.grad_clip

    # in MLflow, each prompt's top/bottom grid of the pool; a video backbone's also animated over its frames
    import mlflow

    info = json.loads((run_dir / "run.json").read_text())
    listed = mlflow.MlflowClient(info["tracking_uri"]).list_artifacts(info["mlflow_run_id"], "pool/iter_0000/top_bottom")
    names = {a.path.rsplit("/", 1)[-1] for a in listed}
    assert {f"prompt_{i:04d}.png" for i in range(p)} <= names
    assert ({f"prompt_{i:04d}.gif" for i in range(p)} <= names) == bool(frames)
