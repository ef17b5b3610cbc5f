"""quantize_linears / NVFP4EmulatedLinear on a tiny SD3 transformer and on hand-made models."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from solrl_core.models.quant import (
    NVFP4EmulatedLinear,
    eligible_linears,
    quantize_dequantize,
    quantize_linears,
    skip_match,
)
from tiny_transformers import SD35_SKIP, forward_fn, tiny_sd3


def linear_names(model):
    return {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}


def emulated_names(model):
    return {n for n, m in model.named_modules() if isinstance(m, NVFP4EmulatedLinear)}


# ---------------------------------------------------------------- skip-name rule


@pytest.mark.parametrize(
    "name,skip,hit",
    [  # the reference's rule: the skip name is a substring of the qualified name (dots and word edges ignored)
        ("norm_out", "norm_out", True),
        ("norm_out.linear", "norm_out", True),
        ("transformer_blocks.3.attn.qkv", "attn.qkv", True),
        ("transformer_blocks.0.norm1.linear", "norm1", True),
        ("transformer_blocks.0.norm1_context.linear", "norm1", True),
        ("transformer_blocks.0.attn2.to_q", "attn", True),
        ("transformer_blocks.10.attn.to_q", "transformer_blocks.1", True),
        ("x_embedder", "embedder", True),
        ("transformer_blocks.0.ff_context.net.2", "ff_context", True),
        ("transformer_blocks.0.ff.net.2", "ff_context", False),
        ("context_embedder", "x_embedder", False),
        ("transformer_blocks.0.norm1.linear", "Norm1", False),  # case-sensitive
        ("transformer_blocks.0.norm1.linear", "norm1.linear.", False),
    ],
)
def test_skip_match_rule(name, skip, hit):
    assert (skip_match(name, [skip]) == skip) is hit


def test_skip_match_returns_the_first_matching_name_and_rejects_an_empty_one():
    assert skip_match("transformer_blocks.0.norm1_context.linear", ["ff", "context", "norm1"]) == "context"
    assert skip_match("transformer_blocks.0.attn.to_q", ["ff", "norm1"]) is None
    with pytest.raises(ValueError, match="every layer"):
        skip_match("a.b", ["norm1", ""])


# ---------------------------------------------------------------- tiny SD3 transformer


def test_quantize_tiny_sd3_honours_skip_names_and_min_width():
    model = tiny_sd3()
    all_linears = linear_names(model)
    expected = eligible_linears(model, SD35_SKIP, min_width=32)
    assert not emulated_names(model)  # eligible_linears leaves the model alone

    report = quantize_linears(model, SD35_SKIP, min_width=32)

    assert emulated_names(model) == set(expected) == {r.name for r in report.layers if r.replaced}
    assert {r.name for r in report.layers} == all_linears
    for row in report.layers:
        module = model.get_submodule(row.name)
        if row.replaced:
            assert isinstance(module, NVFP4EmulatedLinear) and row.reason == "eligible"
            assert max(row.in_features, row.out_features) > 32 and skip_match(row.name, SD35_SKIP) is None
            assert 0.0 < row.weight_rel_error < 0.2
        else:
            assert type(module) is nn.Linear and row.weight_rel_error is None
            assert skip_match(row.name, SD35_SKIP) or max(row.in_features, row.out_features) <= 32
    # The rules at work on this model: a skipped wide layer, a kept narrow one, a replaced one.
    rows = {r.name: r for r in report.layers}
    assert rows["transformer_blocks.0.norm1.linear"].reason == "skip name 'norm1'"
    assert rows["transformer_blocks.0.attn.to_q"].reason == "max(in, out) = 32 <= min_width 32"
    assert rows["transformer_blocks.0.norm1_context.linear"].reason == "skip name 'norm1'"  # a substring of it
    assert rows["transformer_blocks.1.ff.net.2"].replaced


def test_replaced_layer_computes_linear_of_quantized_input_and_weight():
    model = tiny_sd3()
    name = "transformer_blocks.0.ff.net.2"
    original = model.get_submodule(name)
    w, b = original.weight.detach().clone(), original.bias.detach().clone()
    quantize_linears(model, [], min_width=0)
    layer = model.get_submodule(name)
    assert isinstance(layer, NVFP4EmulatedLinear)
    assert not layer.weight.requires_grad and not any(p.requires_grad for p in layer.parameters())
    x = torch.randn(2, 5, 128, generator=torch.Generator().manual_seed(3))
    expected = F.linear(quantize_dequantize(x, "nvfp4"), quantize_dequantize(w, "nvfp4_2d"), b)
    assert torch.equal(layer(x), expected)


def test_tiny_sd3_output_close_to_fp32():
    """Observed relative error of the whole model's output (fixed inputs, torch 2.14 CPU):
    0.139 with every Linear in NVFP4, 0.0084 with SD3.5's skip list and min width 32.
    Bounds are about 2× and 3.5× those."""
    results = {}
    for skip, min_width in (([], 0), (SD35_SKIP, 32)):
        model = tiny_sd3()
        run = forward_fn(model)
        with torch.no_grad():
            y_fp = run()
        report = quantize_linears(model, skip, min_width, calibration=run)
        with torch.no_grad():
            y_q = run()
        assert torch.isfinite(y_q).all()
        rel = ((y_q.double() - y_fp.double()).norm() / y_fp.double().norm()).item()
        assert report.calibration_rel_error == pytest.approx(rel, rel=1e-12)
        results[min_width] = rel
    assert 0.0 < results[0] < 0.3
    assert 0.0 < results[32] < 0.03


def test_report_totals_consistent_and_json():
    model = tiny_sd3()
    report = quantize_linears(model, ["norm_out"], min_width=32)
    d = report.to_dict()
    assert json.loads(json.dumps(d)) == d
    totals, rows = d["totals"], d["layers"]
    assert totals["layers"] == len(rows) == totals["layers_replaced"] + totals["layers_kept"]
    assert totals["layers_replaced"] == sum(r["replaced"] for r in rows)
    total = sum(r["in_features"] * r["out_features"] for r in rows)
    low = sum(r["in_features"] * r["out_features"] for r in rows if r["replaced"])
    assert (totals["linear_params_total"], totals["linear_params_low_precision"]) == (total, low)
    assert totals["low_precision_share"] == pytest.approx(low / total)
    assert 0.0 < totals["low_precision_share"] < 1.0
    assert totals["calibration_rel_error"] is None
    assert d["skip_names"] == ["norm_out"] and d["min_width"] == 32 and d["weight_fmt"] == "nvfp4_2d"


# ---------------------------------------------------------------- hand-made models


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.unaligned = nn.Linear(20, 64)  # in_features not a multiple of 16
        self.blocks = nn.ModuleList([nn.Linear(64, 64, bias=False), nn.Linear(64, 48)])
        self.tied = self.blocks[0]  # the same Linear under a second name


def test_unaligned_in_features_kept_and_shared_linear_swapped_once():
    model = Toy()
    report = quantize_linears(model, [], min_width=16)
    rows = {r.name: r for r in report.layers}
    assert not rows["unaligned"].replaced
    assert rows["unaligned"].reason == "in_features 20 is not a multiple of 16 (NVFP4 GEMM blocks)"
    assert rows["blocks.0"].replaced and rows["tied"].replaced and rows["blocks.1"].replaced
    assert model.tied is model.blocks[0] and isinstance(model.tied, NVFP4EmulatedLinear)
    assert model.blocks[0].bias is None
    assert eligible_linears(Toy(), [], min_width=16) == ["blocks.0", "blocks.1", "tied"]


def test_emulated_linear_options():
    lin = nn.Linear(32, 8)
    x = torch.randn(4, 32)
    weight_only = NVFP4EmulatedLinear(lin, weight_fmt="nvfp4", act_fmt=None)
    assert torch.equal(weight_only(x), F.linear(x, quantize_dequantize(lin.weight.detach(), "nvfp4"), lin.bias))
    with pytest.raises(ValueError):
        NVFP4EmulatedLinear(lin, weight_fmt="fp8")
    with pytest.raises(ValueError):
        NVFP4EmulatedLinear(lin, act_fmt="nvfp4_2d")
    with pytest.raises(TypeError):
        quantize_linears(nn.Sequential(nn.Linear(32, 32)), [], 0, calibration=lambda: "not a tensor")
