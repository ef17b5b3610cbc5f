"""The explore's cheaper decode (`explore.decode`) as calibration candidates, in the planner's prices, and in a run:
its pool holds what the rewards read, the regenerate decodes in full."""

from __future__ import annotations

import numpy as np
import pytest

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.planner import explore_policies as ep
from solrl_core.planner.config_plan import config_forward, plan_config
from solrl_core.planner.cost_model import Throughput, iteration_cost, shapes_from_config
from solrl_core.planner.gpus import DEFAULT_UTILISATION, get_gpu

VIDEO = "configs/demo_video.yaml"
FIRST_FRAME = ["rewards={jpeg: 1.0}", "reward_models={jpeg: {video_frames: 1}}"]
SMALL = ["prompts.per_iteration=2", "explore.seeds_per_prompt=4", "explore.batch_size=4", "select.k=2",
         "regenerate.batch_size=4"]


def test_decode_candidates_are_offered_for_video_models_only():
    video = {p.short_label() for p in ep.candidate_policies(load_config(VIDEO))}
    assert {"nvfp4@6+d0.5", "fp8@6+d0.5", "full@6+d0.5"} <= {label.replace("_emulated", "") for label in video}
    assert not any("+dF" in label for label in video)  # embedded_motion reads every frame: nothing to leave out
    first = {p.short_label() for p in ep.candidate_policies(load_config(VIDEO, FIRST_FRAME))}
    assert {"nvfp4@6+dF", "nvfp4@6+d0.5+dF"} <= first
    assert not any("+d" in p.short_label() for p in ep.candidate_policies(load_config(TINY)))
    policy = ep.ExplorePolicy("nvfp4_emulated", 6, decode_scale=0.5, decode_frames="scored")
    cfg = ep.with_overrides(load_config(VIDEO, FIRST_FRAME), policy.overrides())
    assert (cfg.explore.decode.scale, cfg.explore.decode.frames) == (0.5, "scored")
    assert policy.label() == "nvfp4_emulated @ 6 (decoded at 0.5 scale, the scored frames decoded)"


def test_the_decode_share_is_priced_on_the_model_it_is_for():
    """On the embedded video model the decode costs nothing (its latent is the frames); priced as Wan 2.1 1.3B, a
    decode at half scale leaves a quarter of the explore's decode, the first frame alone half (1 of 2 latent
    frames at 5 frames), and the denoising is unchanged."""
    cfg = load_config(VIDEO, FIRST_FRAME)
    forward = config_forward(cfg, "wan")
    per_image = forward[1]
    gpu = Throughput(get_gpu("h100"), 8, DEFAULT_UTILISATION)
    n = cfg.prompts.per_iteration * cfg.explore.seeds_per_prompt
    decode_s = n * per_image["decode"] / gpu.rate("bf16")
    full = ep.modelled_seconds(cfg, ep.ExplorePolicy("fp8_emulated", 6), ("h100",), 1.0, forward, "wan")["h100"]
    for scale, frames, left in ((0.5, "all", 0.25), (1.0, "scored", 0.5), (0.5, "scored", 0.125)):
        policy = ep.ExplorePolicy("fp8_emulated", 6, decode_scale=scale, decode_frames=frames)
        cheap = ep.modelled_seconds(cfg, policy, ("h100",), 1.0, forward, "wan")["h100"]
        assert full - cheap == pytest.approx((1 - left) * decode_s, rel=1e-9)
    own = ep.modelled_seconds(cfg, ep.ExplorePolicy("fp8_emulated", 6, decode_scale=0.5), ("h100",), 1.0)["h100"]
    assert own == pytest.approx(ep.modelled_seconds(cfg, ep.ExplorePolicy("fp8_emulated", 6), ("h100",), 1.0)["h100"])


def test_solrl_plan_prices_a_configs_cheaper_decode():
    plain = load_config(VIDEO, FIRST_FRAME)
    cheap = load_config(VIDEO, [*FIRST_FRAME, "explore.decode.frames=scored", "explore.decode.scale=0.5"])
    seconds = [plan_config(c, "b200", model="wan")["families"]["sol_rl"]["seconds"] for c in (plain, cheap)]
    assert seconds[1]["explore_decode_score"] < seconds[0]["explore_decode_score"]
    assert seconds[1]["explore_denoise"] == seconds[0]["explore_denoise"]
    assert seconds[1]["regenerate_decode_score"] == seconds[0]["regenerate_decode_score"]  # the regenerate: in full
    shapes = shapes_from_config(cheap)
    assert shapes.explore_decode_fraction == pytest.approx(0.25 / 4)  # 1 of the embedded model's 4 frames, scale²
    gpu = Throughput(get_gpu("b200"), 8, 0.4)
    decode_only = iteration_cost(config_forward(cheap, "wan")[0], shapes, gpu, 1e12, decode_flops=1e12)
    n = shapes.prompts * shapes.seeds
    assert decode_only["seconds"]["explore_decode_score"] == pytest.approx(n * 1e12 / 16 / gpu.rate("bf16"))


@pytest.mark.slow  # an iteration's sampling stages, twice
def test_a_run_explores_with_the_scored_frames_and_regenerates_in_full(tmp_path, one_torch_thread):
    """explore.decode.frames: scored with a first-frame reward in an iteration of the embedded video model: the
    explore pool's videos are its first frame held (the same first frame as a full decode of the same seeds), its
    attributes say so; the regenerate pool's videos are whole."""
    from solrl_core.run.pool import read_table
    from solrl_core.run.rundir import RunDir
    from solrl_core.stages.runner import run_stage

    pools = {}
    for name, extra in {"cheap": ["explore.decode.frames=scored"], "full": []}.items():
        cfg = load_config(VIDEO, [*SMALL, *FIRST_FRAME, *extra])
        run = RunDir(tmp_path / name)
        for stage in ("quantize", "explore", "score_explore", "select", "regenerate"):
            run_stage(run, cfg, 0, stage, progress=False)
        pools[name] = (read_table(run.stage_dir(0, "explore") / "pool.zarr", ["image", "seed"]),
                       read_table(run.stage_dir(0, "regenerate") / "samples.zarr", ["image"])[0]["image"])
    (cheap, attrs), regenerated = pools["cheap"]
    (full, _), _ = pools["full"]
    np.testing.assert_array_equal(cheap["seed"], full["seed"])
    np.testing.assert_array_equal(cheap["image"][:, 0], full["image"][:, 0])
    np.testing.assert_array_equal(cheap["image"], np.repeat(cheap["image"][:, :1], cheap["image"].shape[1], axis=1))
    assert attrs["explore_decode"] == {"scale": 1.0, "decoded_frames": 1}
    assert not all(np.array_equal(v[0], v[-1]) for v in regenerated)  # the regenerate's frames differ
