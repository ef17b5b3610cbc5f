"""What the explore copy holds in GPU memory beside W0, per explore precision, counted on the meta device.

The explore copy shares W0 (``stages.transformer_copies.merged_transformer``): its tensors ARE the loaded base's,
except

* the LoRA-targeted layers, which hold W0 + ΔW(θ_old) (``LoraPolicy.merged_weights``: one new tensor per targeted
  layer, in the base's dtype) — none with ``quant.lora_branch``, where θ_old's fp32 factors ride beside the
  quantized base instead; and
* the layers the backend replaces (``quant.linear.replace_linears``, eligible by the backbone's skip names and min
  width and the backend's shape rule: ``quant.linear.eligible_linears``, the rule the coverage report applies).

``replaced_layer_bytes`` is what one replaced layer stores, read off the layer classes:

==============================================  =============================================================
backend (implementation)                        a replaced (in × out) layer stores
==============================================  =============================================================
``nvfp4_emulated``, ``fp8_emulated``            the dequantized weight and bias in the source dtype
                                                (``NVFP4EmulatedLinear``, ``FP8EmulatedLinear``): as large as
                                                the source layer
``nvfp4`` / ``fp8`` (transformer_engine)        a ``te.Linear`` with ``params_dtype`` = the source dtype
                                                (``TELinear``): as large as the source layer; TE quantizes
                                                the weight at each forward (no cached copy outside
                                                ``is_first_microbatch``)
``fp8`` (torch._scaled_mm)                      E4M3 codes, 1 byte per weight, a float32 scale, the bias in
                                                the source dtype (``ScaledMMFP8Linear``)
``bf16``                                        a bf16 source weight is shared (no copy), another dtype is
                                                copied to bf16; the bias is copied in bf16 (``BF16Linear``)
``fp32``                                        nothing is replaced
==============================================  =============================================================

A merged targeted layer that the backend replaces is freed once its quantized layer is built (only the copy holds it:
``stages.quantize.build_explore_copy``, ``quant.linear.replace_linears``), so the copy's peak is W0 + every replaced
layer + the merged targeted layers that are not replaced (those stay in the copy), give or take one layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

FP8_SCALE_BYTES = 4  # ScaledMMFP8Linear's float32 weight_scale_inv


@dataclass(frozen=True)
class ExploreBackend:
    """A resolved explore precision: the concrete backend (``quant.backends.CONCRETE_BACKENDS``) and its
    implementation (``BackendChoice.impl``: "transformer_engine", "torch._scaled_mm", "emulated" or "torch")."""

    name: str
    impl: str

    def describe(self) -> str:
        return self.name if self.impl in ("emulated", "torch") else f"{self.name} ({self.impl})"


@dataclass(frozen=True)
class ExploreCopy:
    """How a run builds its explore copy: the backend, ``quant.lora_branch``, and the quantization rule (None: the
    backbone's skip names / min width)."""

    backend: ExploreBackend
    lora_branch: bool = True
    skip_names: tuple[str, ...] | None = None
    min_width: int | None = None


def backend_on_device(precision: str, device: str) -> ExploreBackend:
    """``explore.precision`` as it resolves on this machine's ``device`` (``quant.backends.resolve_backend``)."""
    from solrl_core.models.quant.backends import resolve_backend

    choice = resolve_backend(precision, device)
    return ExploreBackend(choice.name, choice.impl)


def backend_on_gpu(precision: str, gpu, transformer_engine: bool = True) -> ExploreBackend:
    """``explore.precision`` as it would resolve on a GPU of the planner's table (``planner.gpus.GPU``), with or
    without transformer-engine installed: ``auto`` by ``quant.backends``' own rule (Blackwell → nvfp4, Hopper / Ada
    → fp8, else nvfp4_emulated); a real precision named outright is priced as if the GPU ran it."""
    from solrl_core.models.quant.backends import BLACKWELL, FP8_MIN_CAPABILITY, _resolve_auto

    fp8_impl = "transformer_engine" if transformer_engine else "torch._scaled_mm"
    if precision == "nvfp4":
        return ExploreBackend("nvfp4", "transformer_engine")
    if precision == "fp8":
        return ExploreBackend("fp8", fp8_impl)
    if precision != "auto":
        return ExploreBackend(precision, "torch" if precision in ("bf16", "fp32") else "emulated")
    nvfp4 = gpu.native("nvfp4") and transformer_engine
    capability = BLACKWELL if gpu.native("nvfp4") else FP8_MIN_CAPABILITY if gpu.native("fp8") else (8, 0)
    probe = {"capability": capability,
             "nvfp4": (nvfp4, "transformer_engine" if nvfp4 else None, "" if nvfp4 else "no NVFP4 here"),
             "fp8": (gpu.native("fp8"), fp8_impl if gpu.native("fp8") else None, "")}
    choice = _resolve_auto("cuda", probe)
    return ExploreBackend(choice.name, choice.impl)


def replaced_layer_bytes(backend: ExploreBackend, linear: nn.Linear, dtype: torch.dtype) -> int:
    """New bytes one ``linear`` (its weight and bias in ``dtype``) takes once the backend replaced it (module
    docstring)."""
    weight = linear.in_features * linear.out_features
    bias = linear.out_features if linear.bias is not None else 0
    size = torch.empty((), dtype=dtype).element_size()
    if backend.name == "fp32":
        return 0
    if backend.name == "bf16":
        return (0 if dtype == torch.bfloat16 else 2 * weight) + 2 * bias
    if backend.name == "fp8" and backend.impl == "torch._scaled_mm":
        return weight + FP8_SCALE_BYTES + size * bias
    return size * (weight + bias)


def _shape_rule(backend: ExploreBackend):
    """The backend's GEMM shape rule (``quant.backends``' own, for the official NVFP4 formats)."""
    from solrl_core.models.quant.backends import BackendChoice, _factory

    return _factory(BackendChoice(backend.name, "", impl=backend.impl), "nvfp4_2d", "nvfp4")[1]


def _targeted(name: str, targets: tuple[str, ...]) -> bool:
    """peft's rule for a target given as a module-name suffix."""
    return any(name == t or name.endswith("." + t) for t in targets)


def targeted_linears(module: nn.Module, targets: tuple[str, ...]) -> list[tuple[str, nn.Linear]]:
    """The Linear layers of ``module`` a LoRA on ``targets`` wraps."""
    return [(n, m) for n, m in module.named_modules() if isinstance(m, nn.Linear) and _targeted(n, targets)]


def merged_bytes(module: nn.Module, targets: tuple[str, ...], dtype: torch.dtype,
                 replaced: frozenset[str] = frozenset()) -> int:
    """W0 + ΔW of every targeted layer not in `replaced`: a new weight (no bias) in the base's dtype
    (``merged_weights``)."""
    size = torch.empty((), dtype=dtype).element_size()
    return sum(size * m.in_features * m.out_features for n, m in targeted_linears(module, targets) if n not in replaced)


def explore_copy_bytes(module: nn.Module, copy: ExploreCopy, skip_names: tuple[str, ...], min_width: int,
                       targets: tuple[str, ...], dtype: torch.dtype) -> dict[str, int]:
    """The explore copy's peak beside W0, in bytes: ``quantized`` (every replaced layer) and ``merged`` (the W0 + ΔW
    of every targeted layer the backend keeps; 0 with ``lora_branch``) of the full-size ``module`` (meta device, no
    LoRA), under the rule ``skip_names`` / ``min_width`` (the config's, or the backbone's)."""
    from solrl_core.models.quant.linear import eligible_linears

    replaced: list[str] = []
    if copy.backend.name != "fp32":
        replaced = eligible_linears(module, skip_names, min_width, shape_rule=_shape_rule(copy.backend))
    layers = dict(module.named_modules(remove_duplicate=False))
    unique = {id(layers[n]): layers[n] for n in replaced}  # a Linear under two names is built once
    quantized = sum(replaced_layer_bytes(copy.backend, m, dtype) for m in unique.values())
    merged = 0 if copy.lora_branch else merged_bytes(module, targets, dtype, frozenset(replaced))
    return {"quantized": quantized, "merged": merged}
