"""`solrl plan CONFIG`: a run config's backbone and sizes priced for every family (solrl_core/planner/config_plan.py;
the command itself: tests/e2e/test_plan_config_cli.py)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

from solrl_core.config.loading import load_config
from solrl_core.planner.config_plan import family_shapes, plan_config
from solrl_core.planner.flops import planner_model
from solrl_core.planner.flops import count_flops
from solrl_core.planner.cost_model import FAMILIES, Shapes, Throughput, iteration_cost, plan, shapes_from_config
from solrl_core.planner.gpus import get_gpu
from repo_paths import ROOT

pytestmark = pytest.mark.slow  # whole iterations or models: `make test` runs it, `make test-fast` not

PRESETS = ROOT / "configs" / "presets"


@pytest.mark.parametrize("preset, model", [("flux1_sol_rl_pickscore", "flux1"), ("sd35l_sol_rl_hpsv2", "sd35l"),
                                           ("sd35m_sol_rl_clipscore", "sd35m"), ("sana_sol_rl_imagereward", "sana")])
def test_an_official_preset_plans_like_its_model_at_official_shapes(preset, model):
    cfg = load_config(PRESETS / f"{preset}.yaml")
    assert planner_model(cfg) == model
    from_config = plan_config(cfg, "b200")
    official = plan(model, "b200")
    assert from_config["config_family"] == "sol_rl" and list(from_config["families"]) == list(FAMILIES)
    for family in FAMILIES:
        assert from_config["families"][family]["seconds"] == pytest.approx(official["families"][family]["seconds"])


def test_the_demo_config_prices_its_own_shapes_and_the_other_families_at_its_sizes():
    cfg = load_config(ROOT / "configs" / "demo.yaml")
    shapes = family_shapes(cfg)
    own = shapes["sol_rl"]
    assert own == shapes_from_config(cfg) and own.optimizer_steps == cfg.train.optimizer_steps == 2
    for family, s in shapes.items():
        assert (s.prompts, s.k, s.optimizer_steps) == (cfg.prompts.per_iteration, cfg.select.k, 2)
        assert s.seeds == (cfg.select.k if family == "baseline" else cfg.explore.seeds_per_prompt)
    assert (shapes["naive_scaling"].explore_steps, shapes["naive_quant"].explore_precision) == (10, "nvfp4")
    assert shapes["baseline"].seeds == cfg.select.k  # samples K and trains on all of them
    # a baseline config has no N: the others explore 4 K (the official 96 / 24)
    nft = family_shapes(load_config(ROOT / "configs" / "families" / "baseline.yaml"))
    assert nft["sol_rl"].seeds == 4 * nft["baseline"].k and nft["sol_rl"].explore_steps == 6


def test_optimizer_steps_multiply_the_update_only():
    from solrl_core.planner.flops import forward_flops

    fwd = forward_flops("sana")
    tp = Throughput(get_gpu("h100"), 1, 0.4)
    one = iteration_cost(fwd, Shapes("sol_rl", explore_precision="nvfp4", explore_steps=6, regenerate=True), tp, 1e12)
    two = iteration_cost(fwd, replace(Shapes("sol_rl", explore_precision="nvfp4", explore_steps=6, regenerate=True),
                                      optimizer_steps=2), tp, 1e12)
    assert two["seconds"]["update"] == pytest.approx(2 * one["seconds"]["update"])
    assert two["seconds"]["rollout"] == one["seconds"]["rollout"]


def test_embedded_forward_counts_attention_on_cpu():
    cfg = load_config(ROOT / "configs" / "demo.yaml")
    result = plan_config(cfg, "b200", gpus=1)
    f = result["forward"]
    # 4 joint blocks over 64 image + 8 text tokens at width 128: q k^T and attn v, 2 FLOPs per multiply-add
    assert f["attention"] == pytest.approx(4 * 4 * (64 + 8) ** 2 * 128)
    assert f["image_tokens"] == 64 and f["text_tokens"] == 8
    assert 0.4 < f["low_precision_share"] < 0.7  # the feed-forward in 4 bits, attention kept (min width 128)


def test_count_flops_counts_sdpa_of_real_cpu_tensors():
    class Attend(torch.nn.Module):
        def forward(self, q):
            return torch.nn.functional.scaled_dot_product_attention(q, q, q)

    q = torch.randn(2, 3, 10, 16)
    breakdown = count_flops(Attend(), lambda: Attend()(q))
    assert breakdown.attention == 2 * 3 * 2 * (2 * 10 * 10 * 16)


def test_a_config_plan_states_its_memory_per_stage_and_what_it_writes_to_disk():
    from solrl_core.planner.disk import _size, run_disk
    from solrl_core.planner.explore_copy import ExploreBackend
    from solrl_core.planner.fits import stage_memory
    from solrl_core.planner.cost_model import format_plan

    cfg = load_config(PRESETS / "flux1_sol_rl_pickscore.yaml")
    result = plan_config(cfg, "h100")
    disk = run_disk(cfg)
    assert result["disk"]["run_bytes"] == disk.run_bytes and result["disk"]["per_iteration"] == disk.per_iteration
    memory = result["memory"]
    assert memory["explore_backend"] == {"name": "fp8", "impl": "transformer_engine"}  # auto on Hopper, with TE
    priced = {s.stage: s.gib for s in stage_memory(cfg, ExploreBackend("fp8", "transformer_engine"))}
    assert {stage: s["gib"] for stage, s in memory["stages"].items()} == pytest.approx(priced)
    without_te = stage_memory(cfg, ExploreBackend("fp8", "torch._scaled_mm"))[0].gib
    assert memory["explore_without_te"]["gib"] == pytest.approx(without_te) and without_te < priced["explore"]
    text = format_plan(result)
    assert f"run directory: ~{_size(disk.iteration_bytes)} per iteration (explore pool" in text
    assert f"~{_size(disk.run_bytes)} over the run's 300 iterations" in text
    assert f"explore {priced['explore']:.1f}, regenerate {priced['regenerate']:.1f}" in text
    blackwell = plan_config(cfg, "b200")["memory"]
    assert blackwell["explore_backend"] == {"name": "nvfp4", "impl": "transformer_engine"}
    assert plan_config(load_config(ROOT / "configs" / "demo.yaml"), "h100", gpus=1)["memory"] is None  # embedded


def test_the_plan_says_plainly_whether_the_config_fits_the_named_card():
    """On a card too small the plan names the stage, its excess and the change that would fit it (as the preflight
    does before a CUDA run: fits.check_memory_fits); on one large enough, that it fits."""
    from solrl_core.planner.cost_model import format_plan
    from solrl_core.planner.fits import MARGIN_GIB

    cfg = load_config(PRESETS / "flux1_sol_rl_pickscore.yaml")
    small = plan_config(cfg, "rtx-5090")
    fit, stages = small["memory"]["fit"], small["memory"]["stages"]
    worst = max(stages, key=lambda stage: stages[stage]["gib"])
    assert not fit["fits"] and fit["memory_gib"] == get_gpu("rtx-5090").memory_gib == 32
    assert fit["stage"] == worst and fit["over_gib"] == pytest.approx(stages[worst]["gib"] + MARGIN_GIB - 32)
    text = format_plan(small)
    assert f"DOES NOT FIT on NVIDIA GeForce RTX 5090 (32 GiB): the {worst} stage needs" in text
    assert fit["remedy"] in text and "run it on GPUs with at least" in fit["remedy"]
    large = plan_config(cfg, "b200")["memory"]["fit"]
    assert large["fits"] and "fits on NVIDIA B200" in format_plan(plan_config(cfg, "b200"))


def test_the_plan_states_the_update_of_the_configs_objective():
    """The assumptions' update line is the objective's: Flow-GRPO-Fast on FLUX.1 (no KL) runs one forward under θ
    per pair; AWM two; the update's seconds follow (one trained time per sample against AWM's 4)."""
    nft = plan_config(load_config(PRESETS / "flux1_sol_rl_pickscore.yaml"), "h100")
    grpo = plan_config(load_config(PRESETS / "flow_grpo" / "flux1_sol_rl_pickscore.yaml"), "h100")
    awm = plan_config(load_config(PRESETS / "awm" / "flux1_sol_rl_pickscore.yaml"), "h100")
    assert any(line.startswith("update = 3 forwards (v, v_old, v_ref)") for line in nft["assumptions"])
    assert any(line.startswith("update (flow_grpo) = 1 forward (under θ) + 1 backward") for line in grpo["assumptions"])
    assert any(line.startswith("update (awm) = 2 forwards (under θ_old, θ)") for line in awm["assumptions"])
    seconds = {name: p["families"]["sol_rl"]["seconds"]["update"] for name, p in
               (("nft", nft), ("grpo", grpo), ("awm", awm))}
    # per sample: NFT 4 times × (3 + 2), GRPO 1 step × (1 + 2), AWM 4 times × (2 + 2) forward costs
    assert seconds["grpo"] / seconds["nft"] == pytest.approx(3 / 20)
    assert seconds["awm"] / seconds["nft"] == pytest.approx(16 / 20)


def test_a_backbone_without_a_full_size_model_is_refused_in_one_line(monkeypatch):
    from solrl_core.errors import SolrlError
    from solrl_core.planner import flops, memory
    from solrl_core.planner.fits import check_memory_fits

    cfg = load_config(ROOT / "configs" / "presets" / "wan_sol_rl_pickscore.yaml")
    # a backbone solrl runs whose full-size config the planner lacks (every shipped one has it): Wan without its rows
    monkeypatch.setattr(flops, "MODELS", {k: m for k, m in flops.MODELS.items() if m.backbone != "wan"})
    monkeypatch.setattr(memory, "SPECS", {k: s for k, s in memory.SPECS.items() if k != "wan"})
    priced = ", ".join(flops.MODELS)
    with pytest.raises(SolrlError, match=r"^the planner has no full-size model of Wan2.1-T2V-1.3B \(model.kind wan\): "
                                         rf"it prices {re.escape(priced)}$"):
        plan_config(cfg, "h100")
    assert check_memory_fits(cfg, 80 * 2**30) is None  # nothing to price: the run is not refused for it


@pytest.mark.parametrize("path, model", [("Wan-AI/Wan2.1-T2V-1.3B-Diffusers", "wan"),
                                         ("/models/Wan2.1-T2V-14B-Diffusers", "wan14b"),
                                         ("stabilityai/stable-diffusion-3.5-medium", "sd35m"),
                                         ("stabilityai/stable-diffusion-3.5-large", "sd35l")])
def test_the_planner_model_is_the_one_the_path_names(path, model):
    preset = {"wan": "wan", "wan14b": "wan", "sd35m": "sd35l", "sd35l": "sd35l"}[model]
    cfg = load_config(PRESETS / f"{preset}_sol_rl_pickscore.yaml", [f"model.path={path}"])
    assert planner_model(cfg) == model


def test_a_video_config_is_priced_at_its_frames_and_resolution():
    """Tokens and latents grow with the frames (4 to a latent frame after the first) and the area; the decode and
    every frame's reward are priced per video."""
    from solrl_core.planner import flops
    from solrl_core.planner.fits import config_tokens
    from solrl_core.planner.samples import full_size_latent

    cfg = load_config(PRESETS / "wan_sol_rl_pickscore.yaml")
    assert config_tokens(cfg, "wan") == (None, None)  # the official 5 frames at 256 px: 2 latent frames of 16 x 16
    longer = load_config(PRESETS / "wan_sol_rl_pickscore.yaml", ["model.frames=33", "model.resolution=512"])
    assert config_tokens(longer, "wan") == (9 * 32 * 32, None)
    assert full_size_latent("wan", 512, 33) == (16, 9, 64, 64)
    assert full_size_latent("wan") == (16, 2, 32, 32)
    per_video = flops.decode_and_score_flops("wan")
    assert per_video["reward"] == 5 * flops.REWARD_FLOPS_PER_IMAGE
    assert per_video["decode"] == flops.vae_decode_flops("wan-f8c16", (16, 2, 32, 32))


def test_wan_presets_are_priced_and_fit_an_80_gb_gpu():
    """The memory check prices both Wan sizes (a hub id: the official checkpoint its path names), and a longer
    video's update holds more activations and samples."""
    from solrl_core.planner.fits import check_memory_fits, stage_memory

    small = load_config(PRESETS / "wan_sol_rl_pickscore.yaml")
    large = load_config(PRESETS / "wan14b_sol_rl_pickscore.yaml")
    for cfg in (small, large):
        stages = {s.stage: s for s in stage_memory(cfg)}
        assert set(stages) >= {"explore", "regenerate", "update", "evaluation"}
        assert [s.stage for s in check_memory_fits(cfg, 80 * 2**30)] == list(stages)  # priced, and it fits
    weights = {cfg.model.path: stage_memory(cfg)[0].parts["weights"] for cfg in (small, large)}
    assert weights[large.model.path] > 9 * weights[small.model.path]  # 14.3 B against 1.4 B
    longer = load_config(PRESETS / "wan_sol_rl_pickscore.yaml", ["model.frames=33"])
    update = {cfg.model.frames: next(s for s in stage_memory(cfg) if s.stage == "update").parts["activations"]
              for cfg in (small, longer)}
    # 9 latent frames against 2: 2304 + 512 text tokens per sample against 512 + 512
    assert update[33] > (2304 + 512) / (512 + 512) * update[5]


def test_a_config_is_priced_at_its_own_shapes():
    """`solrl plan CONFIG` counts the forward at the config's tokens and the decode and reward at its sample: a Wan run
    at 480 px and 81 frames, an SD3.5-L run at 512 px; `--model` keeps the other backbone's official shapes."""
    from solrl_core.planner import flops
    from solrl_core.planner.config_plan import config_forward

    long = load_config(PRESETS / "wan_sol_rl_pickscore.yaml", ["model.frames=81", "model.resolution=480"])
    fwd, per_sample, _, _ = config_forward(long)
    assert (fwd.resolution, fwd.image_tokens, fwd.text_tokens) == (480, 21 * 30 * 30, 512)
    assert fwd.total == flops.forward_flops("wan", image_tokens=21 * 30 * 30, resolution=480).total
    assert per_sample["decode"] == flops.vae_decode_flops("wan-f8c16", (16, 21, 60, 60))
    assert per_sample["reward"] == 81 * flops.REWARD_FLOPS_PER_IMAGE
    # attention products, 2 FLOPs a multiply-add: in each of the 30 blocks the scores and values of the video's n
    # tokens over themselves (self-attention) and over the 512 text tokens (cross-attention), width 1536
    n = 21 * 30 * 30
    assert fwd.attention == pytest.approx(30 * 2 * 2 * 1536 * n * (n + 512), rel=1e-9)
    assert plan_config(long, "b200")["forward"]["image_tokens"] == 18900

    small = load_config(PRESETS / "sd35l_sol_rl_pickscore.yaml", ["model.resolution=512"])
    fwd, per_sample, _, _ = config_forward(small)
    assert fwd.image_tokens == 4096 // 4 and fwd.total < flops.forward_flops("sd35l").total / 3
    assert per_sample["decode"] == flops.vae_decode_flops("kl-f8c16", (16, 64, 64))
    fwd, per_sample, _, _ = config_forward(small, "flux1")  # priced on another backbone: its own shapes
    assert fwd == flops.forward_flops("flux1") and per_sample == flops.decode_and_score_flops("flux1")


def test_the_embedded_video_model_is_priced_by_its_own_forward():
    cfg = load_config(ROOT / "configs" / "demo_video.yaml")
    f = plan_config(cfg, "b200", gpus=1)["forward"]
    from solrl_core.models.backbones.specs.embedded_video import WIDTH

    # 4 blocks, width 192, over 4 frames x 16 patches = 64 video tokens: self-attention over them and cross-attention
    # to the 8 text tokens, q k^T and attn v, 2 FLOPs per multiply-add
    assert (f["image_tokens"], f["text_tokens"], WIDTH) == (64, 8, 192)
    assert f["attention"] == pytest.approx(4 * 2 * 2 * WIDTH * 64 * (64 + 8))
    assert f["model"] == "embedded_video" and 0.3 < f["low_precision_share"] < 0.8  # feed-forward in 4 bits


def test_the_whole_run_adds_iterations_evaluations_and_audits_and_costs_gpu_hours():
    """Each family's whole run (solrl_core/planner/run_total.py) against a count made here: iterations x the
    family's seconds per iteration, plus the evaluations' and audits' full-precision forwards at the plan's bf16
    rate; GPU-hours scale with the GPUs, the cost with the price."""
    from solrl_core.planner.flops import forward_flops

    cfg = load_config(PRESETS / "flux1_sol_rl_pickscore.yaml", ["iterations=40", "eval.every=15", "audit.every=10"])
    result = plan_config(cfg, "h100", gpus=4, price_per_gpu_hour=2.5)
    fwd, bf16 = forward_flops("flux1"), get_gpu("h100").bf16 * 1e12 * 0.4 * 4
    per_image = result["per_image_flops"]["total"]
    evaluation = cfg.eval.num_prompts * cfg.eval.seeds_per_prompt * (cfg.eval.steps * fwd.total + per_image) / bf16
    for family, total in result["run"].items():
        cost = result["families"][family]
        shapes = cost["shapes"]
        audit = shapes["prompts"] * shapes["seeds"] * (shapes["regenerate_steps"] * fwd.total + per_image) / bf16
        assert (total["iterations"], total["evaluations"], total["audits"]) == (40, 4, 4)  # before, after 15, 30 and 40
        assert total["wall_s"] == pytest.approx(40 * cost["seconds"]["iteration"] + 4 * evaluation + 4 * audit)
        assert total["gpu_hours"] == pytest.approx(total["wall_s"] / 3600 * 4)
        assert total["cost"] == pytest.approx(total["gpu_hours"] * 2.5)
    eight = plan_config(cfg, "h100", gpus=8)["run"]["sol_rl"]
    assert eight["wall_s"] == pytest.approx(result["run"]["sol_rl"]["wall_s"] / 2)  # work split evenly, no overlap
    assert eight["gpu_hours"] == pytest.approx(result["run"]["sol_rl"]["gpu_hours"]) and eight["cost"] is None


def test_the_plan_text_shows_the_whole_run_per_family_and_the_saving():
    from solrl_core.planner.cost_model import format_plan

    result = plan_config(load_config(PRESETS / "flux1_sol_rl_pickscore.yaml"), "h200", gpus=4, price_per_gpu_hour=3)
    text = format_plan(result)
    run = result["run"]
    assert "Whole run (300 iterations, 16 evaluations) on 4 x NVIDIA H200" in text
    assert "| cost at 3 per GPU-hour |" in text
    for family, total in run.items():
        assert f"| {total['gpu_hours']:.3g} | {total['cost']:,.2f} |" in text, family
    saved = run["naive_scaling"]["gpu_hours"] - run["sol_rl"]["gpu_hours"]
    assert saved > 0 and f"sol_rl saves {saved:.3g} GPU-hours against naive_scaling" in text
    assert "Give --price" in format_plan(plan_config(load_config(PRESETS / "flux1_sol_rl_pickscore.yaml"), "h200"))


def test_the_cli_costs_a_configs_run_and_refuses_a_price_it_cannot_use(capsys):
    import json

    from solrl.cli.main import main

    assert main(["plan", "flux1_sol_rl_pickscore", "--gpu", "h100", "--gpus", "4", "--price", "2.5", "--family",
                 "sol_rl", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["run"]) == ["sol_rl"] and out["run"]["sol_rl"]["price_per_gpu_hour"] == 2.5
    assert main(["plan", "flux1", "--gpu", "h100", "--price", "2.5"]) == 2  # a model has no iterations to cost
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--price costs a CONFIG's whole run" in err[0] and "flux1_sol_rl_pickscore" in err[0]
    for bad in ("0", "-1", "nan", "cheap"):
        with pytest.raises(SystemExit) as info:
            main(["plan", "flux1_sol_rl_pickscore", "--gpu", "h100", "--price", bad])
        assert info.value.code == 2 and f"'{bad}' is not a price" in capsys.readouterr().err
