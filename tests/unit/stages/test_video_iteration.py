"""A video backbone through the pipeline: one sol_rl iteration of the tiny Wan 2.1 on the CPU, its pools with a frame
axis (one candidate one chunk), rewards scored per video, stills and animated previews of its pool; and an iteration of
the embedded video model in its motion world."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from repo_paths import ROOT, TINY
from solrl_core.config.loading import load_config
from solrl_core.worlds import motion
from solrl_core.rewards.registry import score_images
from solrl_core.run.pool import read_table
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run_config import prepare_run
from solrl_core.stages.runner import run_stage

pytestmark = pytest.mark.slow  # whole iterations: make test runs it, make test-fast does not

FRAMES, SIDE = 5, 64
REWARDS = {"jpeg": 1.0, "temporal_consistency": 0.5}


@pytest.fixture(scope="module")
def video_run(tmp_path_factory, one_torch_thread):
    from solrl_core.tiny_bundle import make_tiny_bundle

    tiny = make_tiny_bundle("wan", tmp_path_factory.mktemp("wan") / "tiny")["dir"]
    cfg = load_config(TINY, ["model.kind=wan", f"model.path={tiny}", "explore.steps=2", "regenerate.steps=3",
                             "rewards={jpeg: 1.0, temporal_consistency: 0.5}", "explore.seeds_per_prompt=4",
                             "explore.batch_size=4", "select.k=2", "regenerate.batch_size=4", "train.micro_batch=4",
                             "reward_models={jpeg: {video_frames: 3}}"])
    run = RunDir(tmp_path_factory.mktemp("wan") / "run")
    prepare_run(run, cfg)
    for stage in STAGES:
        run_stage(run, cfg, 0, stage, progress=False)
    return run, cfg


def test_the_pools_hold_videos_one_candidate_per_chunk(video_run):
    run, _ = video_run
    for stage, name in (("explore", "pool.zarr"), ("regenerate", "samples.zarr")):
        pool = zarr.open_group(str(run.stage_dir(0, stage) / name), mode="r")
        assert pool["image"].shape[1:] == (FRAMES, SIDE, SIDE, 3) and pool["image"].chunks == (1, FRAMES, SIDE, SIDE, 3)
        if "latent" in pool:
            assert pool["latent"].shape[1:] == (16, 2, SIDE // 8, SIDE // 8)
    assert np.isfinite(run.manifest(0, "update")["summary"]["loss"])


def test_each_video_is_scored_as_the_registry_scores_videos(video_run):
    run, cfg = video_run
    table, attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr", ["image", "prompt_index"])
    scored = read_table(run.stage_dir(0, "score_explore") / "rewards.zarr", ["reward"])[0]["reward"]
    prompts = [attrs["prompts"][i] for i in table["prompt_index"]]
    expected, parts = score_images(table["image"], prompts, REWARDS, cfg.reward_models)
    np.testing.assert_allclose(scored, expected)
    assert (parts["temporal_consistency"] < 1).all()  # the frames move


def test_the_pool_has_stills_and_animated_previews(video_run):
    from solrl.flows.tracking import _thumbnails
    from solrl_core.grids import STRIP_FRAMES
    from solrl_core.pool_plots import top_bottom_animations, top_bottom_grids

    run, _ = video_run
    pool = run.stage_dir(0, "explore") / "pool.zarr"
    reward = read_table(run.stage_dir(0, "score_explore") / "rewards.zarr", ["reward"])[0]["reward"]
    stills = top_bottom_grids(pool, reward, 1, tile=96)
    animations = top_bottom_animations(pool, reward, 1, tile=96)
    assert sorted(animations) == sorted(stills) == [0, 1]
    frames = animations[0]
    assert len(frames) == FRAMES and not all(np.array_equal(frames[0], f) for f in frames[1:])
    assert stills[0].shape[1] > frames[0].shape[1]  # a still shows several frames side by side
    thumbnail = _thumbnails(pool)[0]
    assert thumbnail.size[0] > STRIP_FRAMES * thumbnail.size[1] * 0.9  # a strip of frames


def test_the_embedded_video_model_trains_in_its_world(tmp_path, one_torch_thread):
    """configs/demo_video.yaml's model, prompts and reward in the tiny run: 4-frame pixel videos in the pools, scored by
    the motion reward, an update that moves the LoRA."""
    cfg = load_config(ROOT / "configs" / "demo_video.yaml", [
        "prompts.per_iteration=2", "explore.seeds_per_prompt=8", "explore.batch_size=8", "explore.steps=3",
        "select.k=4", "regenerate.steps=4", "regenerate.batch_size=4", "train.micro_batch=16", "train.lora_rank=4",
        "train.lora_alpha=8", "eval.every=0"])
    run = RunDir(tmp_path / "run")
    prepare_run(run, cfg)
    for stage in STAGES:
        run_stage(run, cfg, 0, stage, progress=False)
    pool = zarr.open_group(str(run.stage_dir(0, "explore") / "pool.zarr"), mode="r")
    assert pool["image"].shape[1:] == (4, 32, 32, 3) and pool["image"].chunks == (1, 4, 32, 32, 3)
    regenerated = zarr.open_group(str(run.stage_dir(0, "regenerate") / "samples.zarr"), mode="r")
    assert regenerated["latent"].shape[1:] == (3, 4, 32, 32)
    table, attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr", ["image", "prompt_index"])
    scored = read_table(run.stage_dir(0, "score_explore") / "rewards.zarr", ["reward"])[0]["reward"]
    prompts = [attrs["prompts"][i] for i in table["prompt_index"]]
    assert all(p in motion.train_prompts() for p in prompts)
    np.testing.assert_allclose(scored, score_images(table["image"], prompts, {"embedded_motion": 1.0})[0])
    assert np.isfinite(run.manifest(0, "update")["summary"]["loss"])
