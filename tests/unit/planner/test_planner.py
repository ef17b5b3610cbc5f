"""Cost planner: FLOP counting on the meta device, the GPU table, the cost model's arithmetic, the comparison."""

from __future__ import annotations

import re

import pytest
import torch
from diffusers import SD3Transformer2DModel

from solrl_core.errors import SolrlError
from solrl_core.planner import (
    FAMILIES,
    ForwardFlops,
    Shapes,
    Throughput,
    forward_flops,
    format_plan,
    get_gpu,
    get_model,
    iteration_cost,
    official_shapes,
    plan,
    shapes_from_config,
)
from solrl_core.planner.compare import PAPER, compare, format_markdown
from solrl_core.models.model_configs import PACKAGE_CONFIG_DIR, config_dir
from solrl_core.planner.flops import count_flops, example_inputs, vit_image_flops
from solrl_core.planner.gpus import GPU
from solrl_core.models.backbones.registry import backbone_spec
from solrl_core.models.quant.linear import eligible_linears, fp8_shape_rule
from repo_paths import ROOT

CONFIG_DIR = PACKAGE_CONFIG_DIR  # the transformer configs shipped in the package
DOC = ROOT / "docs" / "planner.md"

TINY_SD3 = dict(
    sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=8,
    num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=16, pooled_projection_dim=24,
    pos_embed_max_size=8, qk_norm=None,
)


def _lin(tokens: int, fan_in: int, fan_out: int) -> int:
    return 2 * tokens * fan_in * fan_out


def test_tiny_sd3_flops_match_a_hand_count():
    """A 2-block SD3 transformer (width 16, 16 image + 5 text tokens), every Linear and attention product by hand."""
    with torch.device("meta"):
        model = SD3Transformer2DModel(**TINY_SD3)
    n, t, d = 16, 5, 16  # (8 / 2)² image tokens, text tokens, width = 2 heads × 8
    embed = _lin(1, 256, d) + _lin(1, d, d) + _lin(1, 24, d) + _lin(1, d, d) + _lin(t, 32, d)  # time, pooled, context
    block0 = (
        _lin(1, d, 6 * d) + _lin(1, d, 6 * d)  # norm1, norm1_context (AdaLN-Zero, once per sample)
        + 4 * _lin(n, d, d) + 4 * _lin(t, d, d)  # to_q/k/v/out, add_q/k/v/to_add_out
        + _lin(n, d, 4 * d) + _lin(n, 4 * d, d) + _lin(t, d, 4 * d) + _lin(t, 4 * d, d)  # ff, ff_context
    )
    block1 = (  # the last block is context_pre_only: no to_add_out, no ff_context, a 2·d continuous AdaLN
        _lin(1, d, 6 * d) + _lin(1, d, 2 * d) + 4 * _lin(n, d, d) + 3 * _lin(t, d, d) + _lin(n, d, 4 * d)
        + _lin(n, 4 * d, d)
    )
    head = _lin(1, d, 2 * d) + _lin(n, d, 2 * 2 * 4)  # norm_out, proj_out to patch² × out channels
    linear = embed + block0 + block1 + head
    assert linear == 269_568
    seq = n + t
    attention = 2 * (2 * seq * seq * d + 2 * seq * seq * d)  # per block: QKᵀ and PV over the joint sequence
    conv = 2 * n * d * (4 * 2 * 2)  # patch embedding: a 2×2 stride-2 conv, 4 -> 16 channels, at 16 positions
    low = 2 * (_lin(n, d, 4 * d) + _lin(n, 4 * d, d))  # "norm1" keeps norm1_context.linear too (a substring)

    names = eligible_linears(model, backbone_spec("sd35l").defaults.quant_skip_names, 16, shape_rule=fp8_shape_rule)
    assert sorted(names) == [f"transformer_blocks.{i}.ff.{m}" for i in (0, 1) for m in ("net.0.proj", "net.2")]
    inputs = example_inputs("sd35", TINY_SD3, n, t)
    counted = count_flops(model, lambda: model(**inputs, return_dict=False), names)
    assert counted.linear == linear
    assert counted.attention == attention
    assert counted.conv == conv
    assert counted.total == linear + attention + conv
    assert counted.low_precision == low


def test_count_flops_rejects_unknown_module_names():
    with torch.device("meta"):
        model = SD3Transformer2DModel(**TINY_SD3)
    with pytest.raises(ValueError, match="not modules"):
        count_flops(model, lambda: None, ["transformer_blocks.9.ff"])


def test_vit_h14_reward_flops_analytic():
    # 257 tokens, 32 layers of width 1280 / MLP 5120: ≈ 0.33 TFLOP per 224 px image
    assert vit_image_flops() == pytest.approx(0.334e12, rel=0.01)


@pytest.fixture(scope="module")
def full():
    return {m: forward_flops(m, CONFIG_DIR) for m in ("flux1", "sd35l", "sana")}


@pytest.mark.parametrize("model, billions", [("flux1", 11.9), ("sd35l", 8.1), ("sana", 1.6)])
def test_full_size_parameter_counts(full, model, billions):
    assert full[model].params / 1e9 == pytest.approx(billions, rel=0.03)


def test_official_token_counts_match_the_configs(full):
    import json

    cfg = {m: json.loads((CONFIG_DIR / get_model(m).spec.config_file).read_text()) for m in full}
    assert full["flux1"].image_tokens == (512 // 8 // 2) ** 2 == 1024  # VAE f8, 2×2 packing
    assert cfg["flux1"]["in_channels"] == 16 * 2 * 2
    assert full["sd35l"].image_tokens == (cfg["sd35l"]["sample_size"] // cfg["sd35l"]["patch_size"]) ** 2 == 4096
    assert full["sana"].image_tokens == (cfg["sana"]["sample_size"] // cfg["sana"]["patch_size"]) ** 2 == 1024
    # the reference's text lengths (NVlabs/Sana train_scripts/sol_rl/train_{flux1,sd3,sana}.py TEXT_ENCODER_MAX_SEQ_LEN:
    # T5 128 for FLUX.1 and SD3.5, after SD3's 77 CLIP tokens; Gemma 300 for SANA)
    assert (full["flux1"].text_tokens, full["sd35l"].text_tokens, full["sana"].text_tokens) == (128, 77 + 128, 300)


def test_full_size_attention_flops_by_hand(full):
    # FLUX: 19 double + 38 single blocks, all joint attention over 1024 + 128 tokens at width 3072
    assert full["flux1"].attention == 57 * 4 * 1152**2 * 3072
    # SD3.5-L: 38 joint blocks over 4096 + 205 tokens at width 38 × 64
    assert full["sd35l"].attention == 38 * 4 * 4301**2 * 2432


def test_low_precision_shares(full):
    f = full["flux1"]
    assert f.low_precision_share == pytest.approx(0.941, abs=0.005)  # all Linear bar 9 small layers
    assert f.low_precision / f.linear == pytest.approx(0.999, abs=0.001)
    s = full["sd35l"]
    assert s.low_precision / s.linear == pytest.approx(0.635, abs=0.002)  # as docs/quant_coverage.md
    assert forward_flops("sana-diffusers", CONFIG_DIR).low_precision == 0.0
    assert full["sana"].low_precision == pytest.approx(full["sana"].conv, rel=0.01)  # the FFN's 1×1 convs


def _toy_forward(total: float, low: float) -> ForwardFlops:
    return ForwardFlops("toy", "toy", "Toy", 0, 0, 0, 0, total, total, 0.0, 0.0, low, 0, {})


TOY_GPU = GPU("toy", "toy GPU", bf16=100.0, fp8=200.0, nvfp4=400.0, source="test", memory_gib=80)


def test_cost_model_arithmetic_by_hand():
    fwd = _toy_forward(10e12, 6e12)  # 10 TFLOP forward, 6 TFLOP of it in 4-bit layers
    tp = Throughput(TOY_GPU, gpus=2, utilisation=0.5)  # bf16 1e14 FLOP/s, nvfp4 4e14 FLOP/s sustained
    shapes = Shapes("sol_rl", prompts=3, seeds=8, k=4, explore_steps=6, explore_precision="nvfp4", regenerate=True,
                    regenerate_steps=10, train_timesteps=6)
    s = iteration_cost(fwd, shapes, tp, per_image_flops=1e12)["seconds"]
    assert s["explore_denoise"] == pytest.approx(3 * 8 * 6 * (6e12 / 4e14 + 4e12 / 1e14))  # 7.92
    assert s["explore_decode_score"] == pytest.approx(3 * 8 * 1e12 / 1e14)
    assert s["regenerate"] == pytest.approx(3 * 4 * 10 * 10e12 / 1e14 + 3 * 4 * 1e12 / 1e14)
    assert s["update"] == pytest.approx(3 * 4 * 6 * (3 + 2) * 10e12 / 1e14)  # 36
    assert s["iteration"] == pytest.approx(7.92 + 0.24 + 12.12 + 36.0)

    naive = iteration_cost(fwd, Shapes("naive_scaling", prompts=3, seeds=8, k=4), tp, 1e12)["seconds"]
    assert naive["explore"] == pytest.approx(3 * 8 * 10 * 0.1 + 0.24) and naive["regenerate"] == 0.0
    # explore cost scales with N × steps × (low share / nvfp4 + rest / bf16)
    doubled = iteration_cost(fwd, Shapes("sol_rl", prompts=3, seeds=16, k=4, explore_steps=6,
                                         explore_precision="nvfp4", regenerate=True), tp, 0.0)["seconds"]
    assert doubled["explore"] == pytest.approx(2 * s["explore_denoise"])


def test_four_bit_falls_back_like_auto():
    fwd = _toy_forward(10e12, 6e12)
    shapes = official_shapes("sol_rl", 0.6)
    hopper = GPU("h", "hopper-like", bf16=100.0, fp8=200.0, nvfp4=None, source="test", memory_gib=80)
    ampere = GPU("a", "ampere-like", bf16=100.0, fp8=None, nvfp4=None, source="test", memory_gib=80)
    c = iteration_cost(fwd, shapes, Throughput(hopper, 1, 1.0), 0.0)
    assert c["explore_precision"] == "fp8"
    assert c["seconds"]["explore"] == pytest.approx(48 * 96 * 6 * (6e12 / 2e14 + 4e12 / 1e14))
    c = iteration_cost(fwd, shapes, Throughput(ampere, 1, 1.0), 0.0)
    assert c["explore_precision"] == "bf16"
    assert c["seconds"]["explore"] == pytest.approx(48 * 96 * 6 * 10e12 / 1e14)


def test_official_shapes():
    sol = official_shapes("sol_rl", 0.4)
    assert (sol.prompts, sol.seeds, sol.k, sol.explore_steps, sol.explore_precision, sol.regenerate) == (
        48, 96, 24, 6, "nvfp4", True)
    assert sol.train_timesteps == 4 and official_shapes("sol_rl", 0.6).train_timesteps == 6
    assert official_shapes("baseline", 0.6).seeds == 24
    assert official_shapes("naive_quant", 0.6).explore_steps == 10
    assert not official_shapes("naive_scaling", 0.6).regenerate


def test_shapes_from_demo_config():
    from solrl_core.config.loading import load_config

    cfg = load_config(ROOT / "configs" / "demo.yaml")
    s = shapes_from_config(cfg)
    assert (s.family, s.prompts, s.seeds, s.k, s.explore_steps, s.explore_precision, s.regenerate,
            s.train_timesteps) == ("sol_rl", cfg.prompts.per_iteration, cfg.explore.seeds_per_prompt,
                                   cfg.select.k, cfg.explore.steps, "nvfp4", True, 6)
    nft = shapes_from_config(load_config(ROOT / "configs" / "families" / "baseline.yaml"))
    assert (nft.explore_precision, nft.seeds, nft.k, nft.regenerate) == ("bf16", 6, 6, False)
    assert s.forwards_per_train_step == 3  # DiffusionNFT: θ, θ_old, W0


def test_the_update_is_priced_with_the_objectives_forwards_and_pairs():
    from solrl_core.config.loading import load_config

    demo = ROOT / "configs" / "demo.yaml"
    every_step = ["objective.name=flow_grpo", "explore.steps=10", "objective.flow_grpo.window_start=0",
                  "objective.flow_grpo.window_size=null"]
    grpo = shapes_from_config(load_config(demo, every_step))
    assert (grpo.forwards_per_train_step, grpo.train_timesteps) == (2, 9)  # θ and W0; int(10 · 0.99) SDE steps
    no_kl = shapes_from_config(load_config(demo, [*every_step, "objective.flow_grpo.kl_weight=0"]))
    assert no_kl.forwards_per_train_step == 1
    fast = shapes_from_config(load_config(demo, [*every_step, "objective.flow_grpo.window_size=3"]))
    assert fast.train_timesteps == 3  # Flow-GRPO-Fast: every step of the window (0.99 would train 2 of 3)
    testbed = shapes_from_config(load_config(demo, ["objective.name=flow_grpo", "explore.steps=10"]))
    assert testbed.train_timesteps == 2  # the testbed's window (configs/parts/testbed.yaml): 2 steps from 0, 1 or 2
    awm = shapes_from_config(load_config(demo, ["objective.name=awm"]))
    assert (awm.forwards_per_train_step, awm.train_timesteps) == (3, 6)  # θ, θ_old, W0; 6 stratified times
    awm_no_kl = shapes_from_config(load_config(demo, ["objective.name=awm", "objective.awm.kl_weight=0"]))
    assert awm_no_kl.forwards_per_train_step == 2  # θ_old's forward stays: the ratio and the second KL term
    tp = Throughput(TOY_GPU, gpus=1, utilisation=1.0)
    update = {f: iteration_cost(_toy_forward(10e12, 0.0), s, tp, 0.0)["seconds"]["update"] / s.train_timesteps
              for f, s in ((2, grpo), (1, no_kl))}
    assert update[2] / update[1] == pytest.approx((2 + 2.0) / (1 + 2.0))  # (f + b) forward costs per pair


@pytest.mark.parametrize(
    "call, known",
    [
        (lambda: plan("flux1", "tpu-v5"), "b200"),
        (lambda: plan("sdxl", "b200"), "flux1"),
        (lambda: plan("flux1", "b200", family="grpo"), "sol_rl"),
        (lambda: get_gpu("nope"), "h100"),
        (lambda: get_model("nope"), "sana"),
        (lambda: config_dir("/nonexistent/model-configs"), "SOLRL_MODEL_CONFIGS"),
    ],
)
def test_unknown_names_give_one_line_solrl_error(call, known):
    with pytest.raises(SolrlError) as info:
        call()
    assert "\n" not in str(info.value) and known in str(info.value)


def test_model_and_gpu_aliases():
    assert get_model("FLUX1").key == "flux1" and get_model("sd35-large").key == "sd35l"
    assert get_model("sd35m").key == "sd35m" and get_model("sana").key == "sana"
    assert get_gpu("H100_SXM").key == "h100" and get_gpu("RTX 5090").key == "rtx-5090"


def test_gpu_table_is_dense_and_sourced():
    b200 = get_gpu("b200")
    assert (b200.bf16, b200.fp8, b200.nvfp4) == (2250.0, 4500.0, 9000.0)
    assert get_gpu("h100").nvfp4 is None and get_gpu("a100").fp8 is None
    for key in ("b200", "b300", "gb200", "h100", "h200", "a100", "rtx-pro-6000", "rtx-5090", "l40s"):
        assert get_gpu(key).source


def test_plan_and_format(full):
    r = plan("flux1", "b200", config_directory=CONFIG_DIR)
    assert list(r["families"]) == list(FAMILIES) and r["utilisation"] == 0.4 and r["gpus"] == 8
    sec = {f: c["seconds"] for f, c in r["families"].items()}
    assert sec["sol_rl"]["rollout"] < sec["naive_scaling"]["rollout"]
    assert sec["naive_quant"]["explore"] < sec["naive_scaling"]["explore"]
    assert sec["baseline"]["update"] == sec["sol_rl"]["update"]  # both train on 48 × 24 samples
    text = format_plan(r)
    assert "FLUX.1-dev" in text and "| sol_rl |" in text and "utilisation 0.40" in text
    one = plan("sd35l", "h100", family="sol_rl", gpus=4, utilisation=0.3, config_directory=CONFIG_DIR)
    assert list(one["families"]) == ["sol_rl"] and one["families"]["sol_rl"]["explore_precision"] == "fp8"


def test_compare_rows_and_doc_table(full):
    result = compare(config_directory=CONFIG_DIR)
    assert len(result["rows"]) == 4 * len(PAPER)
    for r in result["rows"]:
        assert r["error"] == pytest.approx(r["predicted_s"] / r["paper_s"] - 1)
        assert r["matching_utilisation"] * r["paper_s"] == pytest.approx(0.4 * r["predicted_s"])
    table = format_markdown(result, "python -m solrl_core.planner.compare")
    doc = DOC.read_text()
    block = re.search(r"<!-- compare:begin -->\n(.*?)\n<!-- compare:end -->", doc, re.S)
    assert block, "docs/planner.md lacks the comparison block"
    assert block.group(1).strip() == table.strip(), "docs/planner.md is stale: rerun the compare command"
