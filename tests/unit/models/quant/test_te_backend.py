"""Transformer Engine backend on a real GPU. Everything here needs transformer-engine (which needs CUDA): elsewhere
the module is not collected (conftest.py beside it) or, imported alone, skipped with the reason. The TE wiring is
also tested without TE, against a fake, in test_quant_backends.py."""

import copy

import pytest
import torch
from torch import nn

try:
    import transformer_engine.pytorch  # noqa: F401  (is it importable at all?)
except Exception as exc:  # ModuleNotFoundError on CPU machines; OSError/RuntimeError on a broken CUDA setup
    pytest.skip(
        f"transformer-engine is not importable here ({type(exc).__name__}); it needs CUDA, cuDNN and an NVIDIA "
        "driver (the gpu extra in pyproject.toml)",
        allow_module_level=True,
    )

from solrl_core.models.quant import apply_backend, requantize_changed, resolve_backend
from solrl_core.models.quant.layers import FP8EmulatedLinear
from solrl_core.models.quant.linear import NVFP4EmulatedLinear, eligible_linears, fp8_shape_rule
from solrl_core.models.quant.te_backend import TELinear, te_support

NVFP4_OK, NVFP4_WHY = te_support("nvfp4")
FP8_OK, FP8_WHY = te_support("fp8")
needs_nvfp4 = pytest.mark.skipif(not NVFP4_OK, reason=f"TE cannot run NVFP4 here: {NVFP4_WHY}")
needs_fp8 = pytest.mark.skipif(not FP8_OK, reason=f"TE cannot run FP8 here: {FP8_WHY}")


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _layer_case(seed=0, in_f=512, out_f=256, tokens=100):
    torch.manual_seed(seed)
    lin = nn.Linear(in_f, out_f).cuda()
    x = torch.randn(2, tokens // 2, in_f, device="cuda")
    return lin, x


@needs_nvfp4
def test_te_nvfp4_linear_matches_the_emulation():
    lin, x = _layer_case()
    real, emu = TELinear(lin, "nvfp4"), NVFP4EmulatedLinear(lin)
    with torch.no_grad():
        y_fp, y_te, y_emu = lin(x), real(x), emu(x)
    assert y_te.shape == y_fp.shape and torch.isfinite(y_te).all()
    quant_err = _rel(y_emu, y_fp)
    assert 0.0 < quant_err < 0.3
    # Same format, same rounding: TE's GEMM is far closer to the emulation than either is to fp32.
    assert _rel(y_te, y_emu) < 0.1 * quant_err


@needs_fp8
def test_te_fp8_linear_matches_the_emulation():
    lin, x = _layer_case(seed=1)
    real, emu = TELinear(lin, "fp8"), FP8EmulatedLinear(lin)
    with torch.no_grad():
        y_fp, y_te, y_emu = lin(x), real(x), emu(x)
    assert _rel(y_te, y_emu) < 0.1 * _rel(y_emu, y_fp)


def tiny_sd3_cuda():
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(0)
    return SD3Transformer2DModel(
        sample_size=16, patch_size=2, in_channels=16, out_channels=16, num_layers=2, attention_head_dim=32,
        num_attention_heads=4, joint_attention_dim=64, caption_projection_dim=128, pooled_projection_dim=64,
        pos_embed_max_size=32,
    ).eval().cuda()


def _forward(model):
    g = torch.Generator(device="cuda").manual_seed(0)
    kw = dict(
        hidden_states=torch.randn(2, 16, 16, 16, generator=g, device="cuda"),
        encoder_hidden_states=torch.randn(2, 16, 64, generator=g, device="cuda"),
        pooled_projections=torch.randn(2, 64, generator=g, device="cuda"),
        timestep=torch.tensor([500.0, 20.0], device="cuda"),
        return_dict=False,
    )
    with torch.no_grad():
        return model(**kw)[0]


@needs_nvfp4
def test_auto_picks_nvfp4_and_the_copy_honours_skip_names():
    choice = resolve_backend("auto", "cuda")
    assert choice.name == "nvfp4" and choice.impl == "transformer_engine", choice.reason
    skip = ["pos_embed", "context_embedder", "time_text_embed", "norm_out", "norm1", "ff_context"]
    base = tiny_sd3_cuda()
    real, emu = copy.deepcopy(base), copy.deepcopy(base)
    report = apply_backend(real, choice, skip, 64)
    apply_backend(emu, "nvfp4_emulated", skip, 64)
    names = {n for n, m in real.named_modules() if isinstance(m, TELinear)}
    assert names == set(eligible_linears(base, skip, 64, fp8_shape_rule)) == {r.name for r in report.layers if r.replaced}
    assert names and report.backend == "nvfp4"
    y_fp, y_te, y_emu = _forward(base), _forward(real), _forward(emu)
    assert _rel(y_te, y_emu) < 0.25 * _rel(y_emu, y_fp)


@needs_nvfp4
def test_sync_on_te_copy_equals_fresh_copy():
    base = tiny_sd3_cuda()
    merged0 = {k: v.clone() for k, v in base.state_dict().items()}
    explore = copy.deepcopy(base)
    apply_backend(explore, "nvfp4", [], 0)
    merged1 = {k: v.clone() for k, v in merged0.items()}
    merged1["transformer_blocks.0.attn.to_q.weight"] += 0.01
    changed = requantize_changed(explore, merged1, merged0)
    assert changed == ["transformer_blocks.0.attn.to_q.weight"]
    fresh = tiny_sd3_cuda()
    fresh.load_state_dict(merged1)
    apply_backend(fresh, "nvfp4", [], 0)
    for (k, a), (k2, b) in zip(explore.state_dict().items(), fresh.state_dict().items()):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            assert k == k2 and torch.equal(a, b), k
    assert torch.equal(_forward(explore), _forward(fresh))
