"""The planner's explore-copy memory (solrl_core/planner/explore_copy.py) against the real explore layers: what a
replaced layer stores, the copy's new tensors beside W0, and how explore.precision resolves per GPU kind."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from solrl_core.planner.explore_copy import (
    ExploreBackend,
    ExploreCopy,
    backend_on_gpu,
    explore_copy_bytes,
    merged_bytes,
    replaced_layer_bytes,
)
from solrl_core.planner.gpus import get_gpu
from solrl_core.models.quant.backends import apply_backend, resolve_backend


def _storages(module: nn.Module) -> dict[int, int]:
    return {t.untyped_storage()._cdata: t.untyped_storage().nbytes()
            for t in (*module.parameters(), *module.buffers()) if t.numel()}


def new_bytes(layer: nn.Module, source: nn.Module) -> int:
    """Bytes of the storages ``layer`` holds that ``source`` does not."""
    shared = _storages(source)
    return sum(n for k, n in _storages(layer).items() if k not in shared)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name", ["nvfp4_emulated", "fp8_emulated", "fp8", "bf16"])
def test_what_a_replaced_layer_stores(name, bias, dtype):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 48, bias=bias)).to(dtype)
    source = nn.Sequential(model[0])  # holds the source layer after the swap
    choice = resolve_backend(name, "cpu") if name != "fp8" else None
    if name == "fp8":  # the FP8 path without transformer-engine (torch._scaled_mm runs on CPU)
        from solrl_core.models.quant.backends import BackendChoice

        choice = BackendChoice("fp8", "cpu test", "fp8", "torch._scaled_mm", "cpu")
    apply_backend(model, choice, [], 0)
    assert type(model[0]) is not nn.Linear
    priced = replaced_layer_bytes(ExploreBackend(choice.name, choice.impl), source[0], dtype)
    assert new_bytes(model[0], source) == priced


def test_the_copy_of_a_model_counts_its_replaced_and_merged_layers():
    model = nn.ModuleDict({"blocks": nn.ModuleList([nn.ModuleDict({"to_q": nn.Linear(64, 64),
                                                                  "ff": nn.Linear(64, 256),
                                                                  "norm": nn.Linear(16, 32)})
                                                   for _ in range(3)])}).to(torch.bfloat16)
    targets = ("to_q",)
    emulated = ExploreBackend("nvfp4_emulated", "emulated")
    # min width 32 keeps each `norm` (16 -> 32); the skip name keeps every ff; each merged to_q is replaced (freed)
    parts = explore_copy_bytes(model, ExploreCopy(emulated, lora_branch=False), ("ff",), 32, targets, torch.bfloat16)
    assert parts == {"quantized": 3 * 2 * (64 * 64 + 64), "merged": 0}
    kept = explore_copy_bytes(model, ExploreCopy(emulated, lora_branch=False), ("to_q",), 32, targets, torch.bfloat16)
    assert kept == {"quantized": 3 * 2 * (64 * 256 + 256), "merged": 3 * 2 * 64 * 64}  # to_q kept: merged stays
    branch = explore_copy_bytes(model, ExploreCopy(emulated), (), 32, targets, torch.bfloat16)
    assert branch == {"quantized": 3 * 2 * (64 * 64 + 64 + 64 * 256 + 256), "merged": 0}
    assert merged_bytes(model, ("to_q", "ff"), torch.float32) == 3 * 4 * (64 * 64 + 64 * 256)
    fp32 = explore_copy_bytes(model, ExploreCopy(ExploreBackend("fp32", "torch"), False), (), 0, targets,
                              torch.bfloat16)
    assert fp32 == {"quantized": 0, "merged": 3 * 2 * 64 * 64}


@pytest.mark.parametrize("gpu, te, expected", [
    ("b200", True, ("nvfp4", "transformer_engine")),
    ("b200", False, ("fp8", "torch._scaled_mm")),  # Blackwell without transformer-engine: FP8 through torch
    ("h100", True, ("fp8", "transformer_engine")),
    ("h100", False, ("fp8", "torch._scaled_mm")),
    ("a100", True, ("nvfp4_emulated", "emulated")),
])
def test_auto_resolves_per_gpu_kind_as_the_backends_do(gpu, te, expected):
    assert backend_on_gpu("auto", get_gpu(gpu), transformer_engine=te) == ExploreBackend(*expected)
    assert backend_on_gpu("fp8_emulated", get_gpu(gpu)) == ExploreBackend("fp8_emulated", "emulated")
