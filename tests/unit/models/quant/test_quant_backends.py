"""Explore precision backends: resolution on (played) CPU / Ampere / Ada / Hopper / Blackwell machines, the
one-line errors, apply_backend for every backend on a tiny SD3 transformer, and the Transformer Engine wiring
against a fake TE (the real-TE tests are in test_te_backend.py; TE never imported at import:
tests/e2e/test_quant_backends_imports.py)."""

import json

import pytest
import torch
from torch import nn

from fake_transformer_engine import FakeFloat8CurrentScaling, FakeNVFP4BlockScaling, make_fake_te
from solrl_core.errors import SolrlError
from solrl_core.models.quant import backends, te_backend
from solrl_core.models.quant.backends import BACKENDS, BackendChoice, apply_backend, resolve_backend, runnable_backends
from solrl_core.models.quant.layers import BF16Linear, FP8EmulatedLinear, ScaledMMFP8Linear
from solrl_core.models.quant.linear import NVFP4EmulatedLinear, eligible_linears, fp8_shape_rule, quantize_linears
from solrl_core.models.quant.te_backend import TELinear
from tiny_transformers import SD35_SKIP, forward_fn, tiny_sd3

PORTABLE = "nvfp4_emulated, fp8_emulated, bf16, fp32"


def play(monkeypatch, capability, te_ok=False, te_why="transformer-engine is not importable (ModuleNotFoundError)",
         scaled_mm=True):
    """Make the backend module see a given GPU (None = no CUDA) and Transformer Engine state."""
    monkeypatch.setattr(backends, "device_capability", lambda device="cpu": capability)
    monkeypatch.setattr(backends, "te_support", lambda kind: (True, "") if te_ok else (False, te_why))
    monkeypatch.setattr(backends, "scaled_mm_available", lambda: scaled_mm)


# ---------------------------------------------------------------- resolution


def test_backend_names():
    assert BACKENDS == ("nvfp4", "nvfp4_emulated", "fp8", "fp8_emulated", "bf16", "fp32", "auto")


def test_auto_on_this_cpu_picks_emulation_and_says_so():
    choice = resolve_backend("auto", "cpu")
    assert choice.name == "nvfp4_emulated" and choice.requested == "auto" and choice.impl == "emulated"
    assert choice.reason == "auto: no CUDA device; NVFP4 is emulated (quantize-dequantize), same numerics, no speed-up"
    assert json.loads(json.dumps(choice.to_dict()))["name"] == "nvfp4_emulated"
    assert runnable_backends("cpu") == ["nvfp4_emulated", "fp8_emulated", "bf16", "fp32"]


@pytest.mark.parametrize("name", ["nvfp4", "fp8"])
def test_real_backends_on_cpu_are_one_line_errors_saying_what_runs(name):
    with pytest.raises(SolrlError) as err:
        resolve_backend(name, "cpu")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"explore precision '{name}' needs ")
    assert msg.endswith(f"this machine can run: {PORTABLE}")
    assert ("Blackwell GPU (sm_100+)" in msg) == (name == "nvfp4")


def test_unknown_name():
    with pytest.raises(SolrlError, match="unknown explore precision 'fp4'; choose one of: nvfp4, "):
        resolve_backend("fp4")


def test_blackwell_with_te(monkeypatch):
    play(monkeypatch, (10, 0), te_ok=True)
    auto = resolve_backend("auto", "cuda")
    assert (auto.name, auto.impl, auto.capability) == ("nvfp4", "transformer_engine", (10, 0))
    assert auto.reason.startswith("auto: Blackwell GPU sm_100 with transformer-engine: real NVFP4 GEMMs")
    assert "no RHT, no stochastic rounding" in auto.reason
    assert resolve_backend("fp8", "cuda").impl == "transformer_engine"
    assert runnable_backends("cuda")[:2] == ["nvfp4", "fp8"]


def test_blackwell_without_te_falls_back_to_scaled_mm_fp8(monkeypatch):
    play(monkeypatch, (12, 0), te_ok=False)
    auto = resolve_backend("auto", "cuda")
    assert (auto.name, auto.impl) == ("fp8", "torch._scaled_mm")
    assert "NVFP4 not available: transformer-engine is not importable" in auto.reason
    with pytest.raises(SolrlError) as err:
        resolve_backend("nvfp4", "cuda")
    msg = str(err.value)
    assert "device 'cuda' (sm_120): transformer-engine is not importable" in msg
    assert msg.endswith(f"this machine can run: fp8, {PORTABLE}")


@pytest.mark.parametrize("cap,family", [((9, 0), "Hopper"), ((8, 9), "Ada")])
def test_hopper_and_ada_pick_fp8(monkeypatch, cap, family):
    play(monkeypatch, cap, te_ok=True)
    auto = resolve_backend("auto", "cuda:0")
    assert (auto.name, auto.impl) == ("fp8", "transformer_engine")
    assert auto.reason.startswith(f"auto: {family} GPU sm_{cap[0]}{cap[1]}: real FP8 E4M3 GEMMs")
    with pytest.raises(SolrlError, match=r"'nvfp4' needs a Blackwell GPU \(sm_100\+\) with transformer-engine; .*"
                       r"is not Blackwell \(sm_100\+\); this machine can run: fp8, nvfp4_emulated"):
        resolve_backend("nvfp4", "cuda:0")
    play(monkeypatch, cap, te_ok=False)
    assert resolve_backend("fp8", "cuda:0").impl == "torch._scaled_mm"
    play(monkeypatch, cap, te_ok=False, scaled_mm=False)
    auto = resolve_backend("auto", "cuda:0")
    assert auto.name == "nvfp4_emulated" and f"sm_{cap[0]}{cap[1]} runs neither NVFP4 nor FP8" in auto.reason


def test_older_gpu_emulates(monkeypatch):
    play(monkeypatch, (8, 0), te_ok=True)
    auto = resolve_backend("auto", "cuda")
    assert auto.name == "nvfp4_emulated"
    assert "sm_80 runs neither NVFP4 nor FP8 (GPU sm_80 has no FP8 tensor cores (needs sm_89+))" in auto.reason
    with pytest.raises(SolrlError, match=f"this machine can run: {PORTABLE}$"):
        resolve_backend("fp8", "cuda")
    assert resolve_backend("bf16", "cuda").impl == "torch"
    assert resolve_backend("bf16", "cpu").impl == "emulated"


# ---------------------------------------------------------------- apply_backend on a tiny SD3


def _model_and_ref():
    model = tiny_sd3()
    with torch.no_grad():
        ref = forward_fn(model)()
    return model, ref


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _names(model, cls):
    return {n for n, m in model.named_modules() if isinstance(m, cls)}


def test_fp32_replaces_nothing_and_says_so():
    model, ref = _model_and_ref()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = apply_backend(model, "fp32", SD35_SKIP, 0, calibration=forward_fn(model))
    assert report.n_replaced == 0 and report.n_kept == len(report.layers) > 0
    assert report.backend == "fp32" and report.backend_reason.startswith("fp32: full precision")
    assert all(r.reason == "fp32 backend: full precision, nothing replaced" for r in report.layers)
    assert report.to_dict()["totals"]["low_precision_share"] == 0.0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with torch.no_grad():
        assert torch.equal(forward_fn(model)(), ref)


def test_nvfp4_emulated_is_the_existing_path():
    a, b = tiny_sd3(), tiny_sd3()
    report = apply_backend(a, "nvfp4_emulated", SD35_SKIP, 32)
    old = quantize_linears(b, SD35_SKIP, 32)
    assert [r.name for r in report.layers if r.replaced] == [r.name for r in old.layers if r.replaced]
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert report.backend == "nvfp4_emulated" and report.backend_reason.startswith("auto") is False
    d = report.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["backend"] == "nvfp4_emulated" and "emulated" in d["backend_reason"]


def test_auto_on_cpu_applies_emulation():
    model, _ = _model_and_ref()
    report = apply_backend(model, "auto", [], 0)
    assert report.backend == "nvfp4_emulated" and report.backend_reason.startswith("auto: no CUDA device")
    assert _names(model, NVFP4EmulatedLinear) == set(eligible_linears(tiny_sd3(), [], 0))


def test_fp8_emulated_and_bf16():
    errors = {}
    for name, cls in (("fp8_emulated", FP8EmulatedLinear), ("bf16", BF16Linear), ("nvfp4_emulated", NVFP4EmulatedLinear)):
        model, ref = _model_and_ref()
        report = apply_backend(model, name, [], 0, calibration=forward_fn(model))
        rule = fp8_shape_rule if name == "fp8_emulated" else (lambda lin: None) if name == "bf16" else None
        expected = set(eligible_linears(tiny_sd3(), [], 0, rule)) if rule else set(eligible_linears(tiny_sd3(), [], 0))
        assert _names(model, cls) == expected == {r.name for r in report.layers if r.replaced}
        with torch.no_grad():
            errors[name] = _rel(forward_fn(model)(), ref)
        assert report.calibration_rel_error == pytest.approx(errors[name], rel=1e-12)
        assert report.backend == name
    # proj_out is 32 -> 12: FP8 GEMMs need out_features % 16, so fp8 keeps it; bf16 takes it.
    assert "proj_out" not in _names(model, FP8EmulatedLinear)
    assert 0 < errors["bf16"] < errors["fp8_emulated"] < errors["nvfp4_emulated"] < 0.3


def test_fp8_scaled_mm_backend_runs_on_cpu_and_matches_emulation():
    choice = BackendChoice("fp8", "test: torch._scaled_mm on CPU", "fp8", "torch._scaled_mm")
    real, emu = tiny_sd3(), tiny_sd3()
    report = apply_backend(real, choice, SD35_SKIP, 0)
    apply_backend(emu, "fp8_emulated", SD35_SKIP, 0)
    assert _names(real, ScaledMMFP8Linear) == _names(emu, FP8EmulatedLinear) != set()
    assert report.backend_reason == "test: torch._scaled_mm on CPU" and report.weight_fmt == "fp8"
    with torch.no_grad():
        assert _rel(forward_fn(real)(), forward_fn(emu)()) < 1e-5


def test_apply_real_backend_on_cpu_model_raises():
    with pytest.raises(SolrlError, match="explore precision 'nvfp4' needs a Blackwell GPU"):
        apply_backend(tiny_sd3(), "nvfp4", [], 0)
    with pytest.raises(SolrlError, match="not a concrete backend"):
        apply_backend(tiny_sd3(), BackendChoice("auto", "x"), [], 0)


# ---------------------------------------------------------------- Transformer Engine wiring (fake TE)


def test_te_nvfp4_wiring_with_a_fake_te(monkeypatch):
    te, recipe, state = make_fake_te()
    monkeypatch.setattr(te_backend, "import_te", lambda: (te, recipe))
    model, ref = _model_and_ref()
    choice = BackendChoice("nvfp4", "test", "nvfp4", "transformer_engine")
    report = apply_backend(model, choice, SD35_SKIP, 32)
    expected = set(eligible_linears(tiny_sd3(), SD35_SKIP, 32, fp8_shape_rule))
    assert _names(model, TELinear) == expected == {r.name for r in report.layers if r.replaced} != set()
    layer = model.get_submodule(sorted(expected)[0])
    assert layer.recipe == FakeNVFP4BlockScaling(disable_rht=True, disable_stochastic_rounding=True,
                                                 disable_2d_quantization=False)
    assert not any(p.requires_grad for p in layer.parameters())
    with torch.no_grad():
        out = forward_fn(model)()
    # The fake GEMM is exact, so the copy reproduces the fp32 model: weights and biases were copied.
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    assert len(state["calls"]) == len(expected) and state["active"] is None
    # 1x16 weight blocks on request; activations must be quantized.
    assert TELinear(nn.Linear(32, 32), "nvfp4", "nvfp4").recipe.disable_2d_quantization is True
    with pytest.raises(SolrlError, match="act_fmt must be 'nvfp4'"):
        apply_backend(tiny_sd3(), choice, [], 0, act_fmt=None)


def test_te_linear_pads_tokens_and_keeps_shape(monkeypatch):
    te, recipe, _ = make_fake_te()
    monkeypatch.setattr(te_backend, "import_te", lambda: (te, recipe))
    lin = nn.Linear(32, 48)
    layer = TELinear(lin, "fp8")
    assert layer.recipe == FakeFloat8CurrentScaling(fp8_format="E4M3") and layer.weight_fmt == "fp8"
    x = torch.randn(3, 5, 32)  # 15 tokens -> padded to 16 inside
    torch.testing.assert_close(layer(x), lin(x))
    assert layer(x).shape == (3, 5, 48)


def test_te_support_without_te_is_a_reason_not_an_exception(monkeypatch):
    def missing():
        raise ModuleNotFoundError("No module named 'transformer_engine'")

    monkeypatch.setattr(te_backend, "import_te", missing)
    ok, why = te_backend.te_support("nvfp4")
    assert not ok and why.startswith("transformer-engine is not importable (ModuleNotFoundError")
