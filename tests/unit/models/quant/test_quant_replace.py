"""Building the explore copy: each source Linear is freed as soon as it is replaced, no backend writes into its
source's tensors (nor does the LoRA sync into tensors shared with the base model), weight errors are read back once
and catch a NaN weight, and a non-finite activation gives NaN instead of a host-synced check."""

from __future__ import annotations

import copy
import gc
import weakref

import pytest
import torch
from torch import nn

from fake_transformer_engine import make_fake_te
from solrl_core.models.quant import apply_backend, quantize_dequantize, replace_linears, requantize_changed, te_backend
from solrl_core.models.quant.backends import BackendChoice, _factory
from solrl_core.models.quant.layers import FP8EmulatedLinear, ScaledMMFP8Linear
from solrl_core.models.quant.linear import NVFP4EmulatedLinear
from tiny_transformers import SD35_SKIP, lora_update, tiny_sd3

SCALED_MM = BackendChoice("fp8", "test", "fp8", "torch._scaled_mm")
TE_NVFP4 = BackendChoice("nvfp4", "test", "nvfp4", "transformer_engine")
TE_FP8 = BackendChoice("fp8", "test", "fp8", "transformer_engine")
BACKENDS = [
    BackendChoice("nvfp4_emulated", "test", "nvfp4_emulated"),
    BackendChoice("fp8_emulated", "test", "fp8_emulated"),
    BackendChoice("bf16", "test", "bf16", "torch"),
    SCALED_MM,
    TE_NVFP4,
    TE_FP8,
]
IDS = ["nvfp4_emulated", "fp8_emulated", "bf16", "fp8_scaled_mm", "te_nvfp4", "te_fp8"]


@pytest.fixture
def fake_te(monkeypatch):
    te, recipe, _ = make_fake_te()
    monkeypatch.setattr(te_backend, "import_te", lambda: (te, recipe))


@pytest.fixture
def frozen_gc():
    """gc.collect() scans only the objects made after this point (the test's), not all of torch's and diffusers'."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


class Chain(nn.Module):
    """Five 64-wide Linears, one kept by a skip name, and the third one registered a second time (``tied``)."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(64, 64, dtype=dtype) for _ in range(4)])
        self.head_keep = nn.Linear(64, 64, dtype=dtype)
        self.tied = self.blocks[2]


@pytest.mark.parametrize("choice", BACKENDS, ids=IDS)
def test_each_source_linear_is_freed_as_soon_as_all_its_names_are_replaced(choice, fake_te, frozen_gc):
    model = Chain()
    refs = {n: weakref.ref(m) for n, m in model.named_modules(remove_duplicate=False) if isinstance(m, nn.Linear)}
    order = ["blocks.0", "blocks.1", "blocks.2", "blocks.3", "tied"]  # the replacement order (named_modules)
    build, shape_rule, _, _ = _factory(choice, "nvfp4_2d", "nvfp4")
    seen = []

    def factory(name, linear):
        gc.collect()
        alive = {r for r in refs.values() if r() is not None}
        # Alive: the kept Linear and every source still registered under a name not yet replaced (this one included).
        pending = order[order.index(name):]
        assert alive == {refs["head_keep"]} | {refs[n] for n in pending}, name
        seen.append(name)
        return build(name, linear)

    report = replace_linears(model, ["head_keep"], 0, factory, shape_rule=shape_rule)
    assert seen == ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]  # "tied" reuses blocks.2's new layer
    assert model.tied is model.blocks[2] and not isinstance(model.tied, nn.Linear)
    assert report.n_replaced == 5
    gc.collect()
    assert {n for n, r in refs.items() if r() is not None} == {"head_keep"}


def weight_sharing_copy(base: nn.Module) -> nn.Module:
    """New modules whose parameters and buffers ARE ``base``'s (the same objects), as the explore copy's are W0's."""
    return copy.deepcopy(base, memo={id(t): t for t in (*base.parameters(), *base.buffers())})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("choice", BACKENDS, ids=IDS)
def test_building_never_writes_into_the_source_tensors(choice, dtype, fake_te):
    base = Chain(dtype)
    with torch.no_grad():  # values that every format rounds (bf16's included)
        for p in base.parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 1.37)
    before = {n: (p._version, p.detach().clone()) for n, p in base.named_parameters()}
    explore = weight_sharing_copy(base)
    apply_backend(explore, choice, [], 0)
    for name, p in base.named_parameters():
        assert p._version == before[name][0] and torch.equal(p, before[name][1]), name
    assert all(type(m) is nn.Linear for m in base.modules() if m is not base and not isinstance(m, nn.ModuleList))
    if choice.name == "bf16" and dtype is torch.bfloat16:  # shared, not copied (and never written, checked above)
        assert explore.blocks[0].weight.data_ptr() == base.blocks[0].weight.data_ptr()


@pytest.mark.parametrize("choice", BACKENDS[:4], ids=IDS[:4])
def test_lora_sync_leaves_tensors_shared_with_the_base_model_intact(choice):
    base = tiny_sd3()
    w0 = {k: (v._version, v.clone()) for k, v in base.state_dict(keep_vars=True).items()}
    explore = weight_sharing_copy(base)
    apply_backend(explore, choice, SD35_SKIP, 32)  # the 32-wide adapter targets stay fp32: shared with W0
    merged0 = {k: v for k, (_, v) in w0.items()}
    merged1 = lora_update(merged0, seed=1)
    requantize_changed(explore, merged1, merged0)
    for k, v in base.state_dict(keep_vars=True).items():
        assert v._version == w0[k][0] and torch.equal(v, w0[k][1]), k
    got = explore.state_dict()
    for k in ("transformer_blocks.0.attn.to_q.weight", "pos_embed.proj.weight"):  # synced: new values, new tensors
        assert torch.equal(got[k], merged1[k]) and got[k].data_ptr() != base.state_dict()[k].data_ptr()


def test_report_errors_are_read_back_once_and_equal_the_formula():
    model = Chain()
    weights = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    report = apply_backend(model, "nvfp4_emulated", [], 0)
    for row in report.layers:
        w = weights[row.name if row.name != "tied" else "blocks.2"]
        w_q = quantize_dequantize(w, "nvfp4_2d")
        expected = ((w_q.double() - w.double()).norm().item()) / w.double().norm().item()
        assert row.weight_rel_error == expected == model.get_submodule(row.name).weight_rel_error, row.name
    zero = nn.Linear(16, 16)
    nn.init.zeros_(zero.weight)
    assert NVFP4EmulatedLinear(zero).weight_rel_error == 0.0  # 0 / 0 is 0 (an all-zero weight is exact)


@pytest.mark.parametrize("choice", BACKENDS, ids=IDS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_weight_is_caught_at_build_naming_the_layer(choice, bad, fake_te):
    model = Chain()
    with torch.no_grad():
        model.blocks[1].weight[3, 5] = bad
    with pytest.raises(ValueError, match=r"layer 'blocks\.1': its weight has non-finite values"):
        apply_backend(model, choice, [], 0)


def test_a_non_finite_weight_is_caught_by_the_lora_sync():
    merged0 = {k: v.clone() for k, v in tiny_sd3().state_dict().items()}
    explore = tiny_sd3()
    apply_backend(explore, "nvfp4_emulated", [], 0)
    merged1 = lora_update(merged0, seed=1)
    merged1["transformer_blocks.0.attn.to_k.weight"][0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"layer 'transformer_blocks\.0\.attn\.to_k'"):
        requantize_changed(explore, merged1, merged0)


LAYERS = {
    "nvfp4": lambda lin: NVFP4EmulatedLinear(lin),
    "nvfp4_1x16": lambda lin: NVFP4EmulatedLinear(lin, "nvfp4"),
    "fp8": FP8EmulatedLinear,
    "fp8_scaled_mm": ScaledMMFP8Linear,
}


@pytest.mark.parametrize("make", LAYERS.values(), ids=LAYERS.keys())
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_activation_gives_nan_outputs_not_an_exception(make, bad):
    layer = make(nn.Linear(64, 32))
    x = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(layer(x)).all()
    x[1, 2, 7] = bad
    assert torch.isnan(layer(x)).all()  # the per-call global scale poisons the whole call: nothing silently finite


@pytest.mark.parametrize("fmt", ["nvfp4", "nvfp4_2d", "fp8"])
def test_unchecked_quantize_dequantize_is_the_checked_one_on_finite_input_and_nan_otherwise(fmt):
    x = torch.randn(40, 48, generator=torch.Generator().manual_seed(1)) * 3
    assert torch.equal(quantize_dequantize(x, fmt, check_finite=False), quantize_dequantize(x, fmt))
    x[7, 9] = float("inf")
    with pytest.raises(ValueError, match="non-finite"):
        quantize_dequantize(x, fmt)
    assert torch.isnan(quantize_dequantize(x, fmt, check_finite=False)).all()

