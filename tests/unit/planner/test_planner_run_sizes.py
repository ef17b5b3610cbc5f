"""The planner's sizes against a real tiny run (the embedded model): the bytes a run writes per artifact
(solrl_core/planner/disk.py) and what the explore copy adds to W0 in memory (solrl_core/planner/explore_copy.py)."""

from __future__ import annotations

import gc
import weakref

import json
import struct
from pathlib import Path

import pytest
import zarr

from solrl_core.config.loading import load_config
from solrl_core.evaluate import run_eval
from solrl_core.planner.disk import backbone_shapes, run_disk
from solrl_core.prompts import CALIBRATION_PROMPT, eval_prompt_set
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run_config import prepare_run
from solrl_core.stages.draws import iteration_prompts
from solrl_core.stages.runner import run_stage
from repo_paths import ROOT, TINY

SMALL = ["iterations=1", "explore.seeds_per_prompt=4", "select.k=2", "train.micro_batch=4", "audit.every=1",
         "eval.every=1", "eval.num_prompts=2", "eval.seeds_per_prompt=1", "eval.batch_size=2"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, one_torch_thread):
    """One iteration of the tiny config, its audit and the evaluation after it."""
    run = RunDir(tmp_path_factory.mktemp("sizes") / "run")
    cfg = prepare_run(run, load_config(TINY, SMALL))
    for stage in STAGES:
        run_stage(run, cfg, 0, stage, progress=False)
    run_stage(run, cfg, 0, "audit", progress=False)
    run_eval(run, cfg, 1)
    return run, cfg


def zarr_bytes(path: Path) -> int:
    """Uncompressed bytes of every array of a zarr group."""
    return sum(array.nbytes for _, array in zarr.open_group(str(path), mode="r").arrays())


def tensor_bytes(path: Path) -> int:
    """A safetensors file's tensor data: its size less the 8-byte length and the JSON header."""
    with open(path, "rb") as f:
        header = struct.unpack("<Q", f.read(8))[0]
    return path.stat().st_size - 8 - header


def test_the_bytes_written_per_artifact_are_the_estimate(tiny_run):
    run, cfg = tiny_run
    est = run_disk(cfg)
    it = run.iteration_dir(0)
    written = {
        "explore pool": zarr_bytes(it / "explore" / "pool.zarr"),
        "regenerate samples": zarr_bytes(it / "regenerate" / "samples.zarr"),
        "rewards and selection": sum(zarr_bytes(it / stage / name) for stage, name in (
            ("score_explore", "rewards.zarr"), ("score_final", "rewards.zarr"), ("select", "selection.zarr"),
            ("explore", "scores.zarr"), ("regenerate", "scores.zarr"))),
        "checkpoint": sum(tensor_bytes(f) for f in (it / "update" / "checkpoint").glob("*.safetensors")),
    }
    assert written == est.per_iteration
    assert {"audit pool": zarr_bytes(it / "audit" / "pool.zarr"),
            "audit rewards": zarr_bytes(it / "audit" / "rewards.zarr")} == est.per_audit
    assert {"evaluation pool": zarr_bytes(run.eval_dir(1) / "pool.zarr")} == est.per_evaluation
    # the text cache: one file per distinct prompt encoded; the estimate counts 2 training prompts, 2 evaluated
    # ones and the calibration prompt, an upper bound (here the calibration prompt is also an evaluated one)
    cache = [tensor_bytes(f) for f in (run.root / "text_cache").rglob("*.safetensors")]
    encoded = {*iteration_prompts(cfg, 0), *eval_prompt_set(cfg), CALIBRATION_PROMPT}
    assert len(cache) == len(encoded) == 4 and set(cache) == {est.once["text cache"] // 5}
    assert est.once["initial adapters"] == tensor_bytes(run.init_dir / "adapters.safetensors")
    assert (est.iterations, est.evaluations, est.audits) == (1, 2, 1)  # evaluations before training and after it


def test_nothing_else_of_size_is_written(tiny_run):
    """Every file is a counted array chunk or tensor file, or small metadata (JSON, PNG grids, safetensors
    headers): no artifact the estimate leaves out, such as merged weights."""
    run, cfg = tiny_run
    counted_groups = [p for p in run.root.rglob("*.zarr") if p.is_dir()]
    other = 0
    for f in (p for p in run.root.rglob("*") if p.is_file()):
        if f.suffix == ".safetensors":
            other += f.stat().st_size - tensor_bytes(f)
        elif any(g in f.parents for g in counted_groups) and f.name != "zarr.json":
            continue  # an array chunk
        else:
            assert f.suffix in (".json", ".png", ".yaml"), f
            other += f.stat().st_size
    assert other < 0.25 * run_disk(cfg).run_bytes  # at this tiny size, the metadata is still smaller


def test_the_explore_copy_adds_what_the_planner_prices(tiny_run):
    """The replaced layers and the merged W0 + θ_old of the targeted layers that stay: the only new tensors beside
    W0 (the rest of the copy IS W0's; a merged layer that is replaced is freed)."""
    from solrl_core.models.backbones.cache import load_backbone
    from solrl_core.planner.explore_copy import ExploreBackend, ExploreCopy, explore_copy_bytes
    from solrl_core.stages.context import StageContext
    from solrl_core.stages.explore_setting import explore_setting
    from solrl_core.stages.quantize import build_explore_copy, old_policy_merged

    run, cfg = tiny_run
    ctx = StageContext(run, cfg, 0, progress=False)
    backbone = load_backbone(cfg)
    base = {t.untyped_storage()._cdata for t in (*backbone.transformer.parameters(), *backbone.transformer.buffers())}
    merged = old_policy_merged(ctx, backbone)
    alive = [weakref.ref(weight) for weight in merged.values()]
    copy = build_explore_copy(ctx, backbone, merged)[0]
    del merged
    gc.collect()
    storages = {t.untyped_storage()._cdata: t.untyped_storage().nbytes()
                for t in (*copy.parameters(), *copy.buffers(), *(w() for w in alive if w() is not None)) if t.numel()}
    new = sum(n for key, n in storages.items() if key not in base)
    setting = explore_setting(ctx)
    d = backbone.defaults
    priced = explore_copy_bytes(backbone.transformer, ExploreCopy(ExploreBackend(setting.precision, "emulated"),
                                                                  lora_branch=cfg.quant.lora_branch),
                                tuple(d.quant_skip_names), d.quant_min_width, tuple(d.lora_targets),
                                next(backbone.transformer.parameters()).dtype)
    assert not cfg.quant.lora_branch and priced["merged"] > 0 and priced["quantized"] > 0
    assert new == priced["quantized"] + priced["merged"]
    assert json.loads((run.stage_dir(0, "quantize") / "report.json").read_text())["totals"]["layers_replaced"] > 0


def test_a_config_priced_from_its_loaded_backbone_or_the_full_size_model(tiny_run):
    from solrl_core.models.backbones.cache import load_backbone

    _, cfg = tiny_run
    shapes = backbone_shapes(cfg, load_backbone(cfg))
    assert shapes.image == (32, 32, 3) and shapes.latent == (3, 32, 32)  # the embedded pixel model at 32 px
    est = run_disk(load_config(FLUX))
    # 48 prompts x 96 seeds at 512 px: the image, FLUX's 16 x 64 x 64 latent in float32, the prompt index and seed,
    # and a batch marker per batch of 32
    per_candidate = 512 * 512 * 3 + 16 * 64 * 64 * 4 + 4 + 8
    assert est.per_iteration["explore pool"] == 48 * 96 * per_candidate + 48 * 96 // 32
    targeted = 19 * 4 + 38 * 3
    lora = targeted * 32 * (3072 + 3072)  # rank 32 on the official targets
    # θ and θ_old, the EMA, AdamW's two moments and a step per tensor (A and B per targeted layer), float32
    assert est.per_iteration["checkpoint"] == (2 + 1 + 2) * 4 * lora + 4 * 2 * targeted
    assert (est.iterations, est.evaluations, est.audits) == (300, 1 + 300 // 20, 0)
    lean = run_disk(load_config(FLUX, ["explore.keep_latents=false"]))
    assert est.per_iteration["explore pool"] - lean.per_iteration["explore pool"] == 48 * 96 * 16 * 64 * 64 * 4
    kept = run_disk(load_config(FLUX, ["family=naive_quant", "regenerate.enabled=false", "explore.keep_latents=false"]))
    assert kept.per_iteration["explore pool"] == est.per_iteration["explore pool"]  # trained on: latents kept


FLUX = ROOT / "configs" / "presets" / "flux1_sol_rl_pickscore.yaml"


@pytest.mark.parametrize("family", [[], ["family=naive_scaling", "explore.precision=fp32", "regenerate.enabled=false"]],
                         ids=["sol_rl", "naive_scaling"])
def test_a_flow_grpo_runs_trajectories_are_priced(family, tmp_path, one_torch_thread):
    """Flow-GRPO's samples keep the SDE window's latents and log-probabilities: the bytes written are the estimate
    (in the regenerate samples, and in the explore pool when the update trains on it)."""
    run = RunDir(tmp_path / "run")
    cfg = prepare_run(run, load_config(TINY, [*SMALL, "objective.name=flow_grpo", "explore.steps=4", *family]))
    for stage in ("quantize", "explore", "score_explore", "select", "regenerate"):
        run_stage(run, cfg, 0, stage, progress=False)
    est, it = run_disk(cfg), run.iteration_dir(0)
    assert zarr_bytes(it / "explore" / "pool.zarr") == est.per_iteration["explore pool"]
    assert zarr_bytes(it / "regenerate" / "samples.zarr") == est.per_iteration["regenerate samples"]
    nft = run_disk(load_config(TINY, [*SMALL, *family]))
    assert est.per_iteration["regenerate samples"] > nft.per_iteration["regenerate samples"]
