"""Explore precision backends: one interface, chosen by name.

==================  ===============================================================  =========================
name                what the explore copy's eligible Linear layers become            runs on
==================  ===============================================================  =========================
``nvfp4``           ``te.Linear`` under TE's NVFP4BlockScaling (inference: no RHT,   Blackwell (sm_100+) with
                    no stochastic rounding) — real 4-bit GEMMs                       transformer-engine
``nvfp4_emulated``  ``NVFP4EmulatedLinear``: quantize–dequantize, then F.linear     anywhere
``fp8``             ``te.Linear`` under FP8 E4M3 current scaling, or, without TE,     sm_89+ (Ada, Hopper,
                    ``ScaledMMFP8Linear`` (``torch._scaled_mm``) — real FP8 GEMMs     Blackwell)
``fp8_emulated``    ``FP8EmulatedLinear``: per-tensor E4M3 quantize–dequantize        anywhere
``bf16``            ``BF16Linear``: bf16 weights and compute (emulated off CUDA)      anywhere
``fp32``            nothing replaced                                                 anywhere
``auto``            the best the device runs: Blackwell + TE → nvfp4; sm_89+ → fp8;  anywhere
                    otherwise nvfp4_emulated (same numerics as nvfp4, no speed-up)
==================  ===============================================================  =========================

``resolve_backend(name, device)`` turns a name into a ``BackendChoice`` (concrete name, implementation and a
sentence saying why), or raises ``SolrlError`` with one line naming what this machine can run.
``apply_backend(model, choice_or_name, ...)`` makes the explore copy in place and returns a ``QuantReport``
that records the backend and the reason. Hardware is probed through ``device_capability`` and ``te_support``
— module-level functions that tests monkeypatch to play a Blackwell, Hopper or CPU machine.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Callable, Iterable

import torch
from torch import nn

from solrl_core.errors import SolrlError
from solrl_core.models.quant.layers import BF16Linear, FP8EmulatedLinear, ScaledMMFP8Linear
from solrl_core.models.quant.linear import (
    LayerRow,
    NVFP4EmulatedLinear,
    QuantReport,
    _linears,
    any_shape,
    fp8_shape_rule,
    nvfp4_shape_rule,
    replace_linears,
)

BACKENDS = ("nvfp4", "nvfp4_emulated", "fp8", "fp8_emulated", "bf16", "fp32", "auto")
CONCRETE_BACKENDS = tuple(b for b in BACKENDS if b != "auto")
PORTABLE_BACKENDS = ("nvfp4_emulated", "fp8_emulated", "bf16", "fp32")  # run on any device

BLACKWELL = (10, 0)
FP8_MIN_CAPABILITY = (8, 9)

_EMULATION_NOTE = "NVFP4 is emulated (quantize-dequantize), same numerics, no speed-up"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackendChoice:
    """A resolved explore precision.

    ``name``: the concrete backend (never "auto"); ``reason``: a sentence saying why, for logs and MLflow;
    ``requested``: what was asked for; ``impl``: "transformer_engine", "torch._scaled_mm", "emulated" or
    "torch"; ``device``: the device it was resolved for; ``capability``: its CUDA compute capability, if any.
    """

    name: str
    reason: str
    requested: str = ""
    impl: str = "emulated"
    device: str = "cpu"
    capability: tuple[int, int] | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["capability"] = list(self.capability) if self.capability is not None else None
        return d


def device_capability(device: str = "cpu") -> tuple[int, int] | None:
    """CUDA compute capability (major, minor) of ``device``, or None for a non-CUDA device or no CUDA."""
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability(dev))


def te_support(kind: str) -> tuple[bool, str]:
    """Whether Transformer Engine can run ``kind`` ("nvfp4" / "fp8") here: ``(ok, reason)``. Imports TE lazily."""
    from solrl_core.models.quant import te_backend

    return te_backend.te_support(kind)


def check_te_version() -> None:
    """A SolrlError naming the installed and the needed version when transformer-engine is too old (imports none)."""
    from solrl_core.models.quant import te_backend

    te_backend.check_te_version()


def scaled_mm_available() -> bool:
    """Whether this torch has ``torch._scaled_mm`` and the E4M3 dtype (the FP8 path without TE)."""
    return hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")


def _sm(cap: tuple[int, int]) -> str:
    return f"sm_{cap[0]}{cap[1]}"


def _probe(device: str) -> dict:
    """What the device can run: {"capability", "nvfp4": (ok, impl, why), "fp8": (ok, impl, why)}."""
    cap = device_capability(device)
    out: dict = {"capability": cap}
    if cap is None:
        out["nvfp4"] = (False, None, "no CUDA device")
        out["fp8"] = (False, None, "no CUDA device")
        return out
    if cap >= BLACKWELL:
        ok, why = te_support("nvfp4")
        out["nvfp4"] = (ok, "transformer_engine" if ok else None, why if not ok else "")
    else:
        out["nvfp4"] = (False, None, f"GPU {_sm(cap)} is not Blackwell (sm_100+)")
    if cap >= FP8_MIN_CAPABILITY:
        ok, why = te_support("fp8")
        if ok:
            out["fp8"] = (True, "transformer_engine", "")
        elif scaled_mm_available():
            out["fp8"] = (True, "torch._scaled_mm", why)
        else:
            out["fp8"] = (False, None, f"{why}; and this torch has no torch._scaled_mm")
    else:
        out["fp8"] = (False, None, f"GPU {_sm(cap)} has no FP8 tensor cores (needs sm_89+)")
    return out


def runnable_backends(device: str = "cpu") -> list[str]:
    """The concrete backends this machine can run on ``device``, fastest first."""
    probe = _probe(device)
    return [b for b in ("nvfp4", "fp8") if probe[b][0]] + list(PORTABLE_BACKENDS)


def _cannot_run(name: str, device: str, probe: dict) -> SolrlError:
    cap = probe["capability"]
    can = ", ".join([b for b in ("nvfp4", "fp8") if probe[b][0]] + list(PORTABLE_BACKENDS))
    if name == "nvfp4":
        need = "needs a Blackwell GPU (sm_100+) with transformer-engine"
    else:
        need = "needs an FP8 GPU (sm_89+: Ada, Hopper, Blackwell) with transformer-engine or torch._scaled_mm"
    where = f"device {device!r} ({_sm(cap)})" if cap is not None else f"device {device!r}"
    detail = probe[name][2]
    return SolrlError(f"explore precision {name!r} {need}; {where}: {detail}; this machine can run: {can}")


def resolve_backend(name: str, device: str = "cpu") -> BackendChoice:
    """Resolve an explore precision name for ``device`` (see the module docstring for the rules).

    Raises ``SolrlError`` (one line) for an unknown name or a backend this machine cannot run.
    """
    if name not in BACKENDS:
        raise SolrlError(f"unknown explore precision {name!r}; choose one of: {', '.join(BACKENDS)}")
    if name in ("fp32", "nvfp4_emulated", "fp8_emulated"):
        cap = device_capability(device) if name != "fp32" else None
        reasons = {
            "fp32": "fp32: full precision explore copy, no layer replaced",
            "nvfp4_emulated": f"nvfp4_emulated: requested; {_EMULATION_NOTE}",
            "fp8_emulated": "fp8_emulated: requested; FP8 E4M3 with per-tensor scales is emulated "
            "(quantize-dequantize), same numerics as fp8, no speed-up",
        }
        impl = "torch" if name == "fp32" else "emulated"
        return BackendChoice(name, reasons[name], name, impl, device, cap)
    if name == "bf16":
        native = torch.device(device).type == "cuda"
        how = "bf16 GEMMs on the GPU" if native else "bf16 rounding emulated in fp32 (no native bf16 GEMM here)"
        return BackendChoice("bf16", f"bf16: requested; {how}", "bf16", "torch" if native else "emulated", device,
                             device_capability(device))

    probe = _probe(device)
    cap = probe["capability"]
    if cap is not None and cap >= FP8_MIN_CAPABILITY:  # where _probe asked transformer-engine: too old is an error
        check_te_version()
    if name in ("nvfp4", "fp8"):
        ok, impl, why = probe[name]
        if not ok:
            raise _cannot_run(name, device, probe)
        return BackendChoice(name, _real_reason(name, impl, cap, why, "requested"), name, impl, device, cap)

    choice = _resolve_auto(device, probe)
    log.info("explore precision %s", choice.reason)
    return choice


def _resolve_auto(device: str, probe: dict) -> BackendChoice:
    cap = probe["capability"]
    if probe["nvfp4"][0]:
        return BackendChoice("nvfp4", _real_reason("nvfp4", probe["nvfp4"][1], cap, "", "auto"), "auto",
                             probe["nvfp4"][1], device, cap)
    if probe["fp8"][0]:
        ok, impl, why = probe["fp8"]
        reason = _real_reason("fp8", impl, cap, why, "auto")
        if cap >= BLACKWELL:
            reason += f" (NVFP4 not available: {probe['nvfp4'][2]})"
        return BackendChoice("fp8", reason, "auto", impl, device, cap)
    if cap is None:
        reason = f"auto: no CUDA device; {_EMULATION_NOTE}"
    else:
        reason = f"auto: GPU {_sm(cap)} runs neither NVFP4 nor FP8 ({probe['fp8'][2]}); {_EMULATION_NOTE}"
    return BackendChoice("nvfp4_emulated", reason, "auto", "emulated", device, cap)


def _real_reason(name: str, impl: str, cap: tuple[int, int], why: str, prefix: str) -> str:
    if name == "nvfp4":
        return (
            f"{prefix}: Blackwell GPU {_sm(cap)} with transformer-engine: real NVFP4 GEMMs "
            "(NVFP4BlockScaling: 16x16 weight tiles, 1x16 activation blocks, no RHT, no stochastic rounding)"
        )
    family = "Blackwell" if cap >= BLACKWELL else ("Hopper" if cap[0] == 9 else "Ada")
    how = "through transformer-engine (Float8CurrentScaling E4M3)" if impl == "transformer_engine" else (
        f"through torch._scaled_mm (transformer-engine unavailable: {why})"
    )
    return f"{prefix}: {family} GPU {_sm(cap)}: real FP8 E4M3 GEMMs with per-tensor scales {how}"


def _factory(choice: BackendChoice, weight_fmt: str, act_fmt: str | None) -> tuple[Callable, Callable, str, str | None]:
    """(layer factory, shape rule, weight_fmt, act_fmt) of a concrete backend."""
    name = choice.name
    if name == "nvfp4_emulated":
        return (lambda _n, lin: NVFP4EmulatedLinear(lin, weight_fmt, act_fmt)), nvfp4_shape_rule, weight_fmt, act_fmt
    if name == "fp8_emulated":
        return (lambda _n, lin: FP8EmulatedLinear(lin)), fp8_shape_rule, "fp8", "fp8"
    if name == "bf16":
        return (lambda _n, lin: BF16Linear(lin)), any_shape, "bf16", "bf16"
    if name == "fp8":
        if choice.impl == "transformer_engine":
            from solrl_core.models.quant.te_backend import TELinear

            return (lambda _n, lin: TELinear(lin, "fp8")), fp8_shape_rule, "fp8", "fp8"
        return (lambda _n, lin: ScaledMMFP8Linear(lin)), fp8_shape_rule, "fp8", "fp8"
    if name == "nvfp4":
        if act_fmt != "nvfp4":
            raise SolrlError("explore precision 'nvfp4' (transformer-engine) quantizes activations; act_fmt must be 'nvfp4'")
        from solrl_core.models.quant.te_backend import TELinear

        # TE's FP4 GEMM wants whole 16x16 tiles: both dims multiples of 16.
        return (lambda _n, lin: TELinear(lin, "nvfp4", weight_fmt)), fp8_shape_rule, weight_fmt, act_fmt
    raise ValueError(f"not a concrete backend: {name!r}")


def _model_device(model: nn.Module) -> str:
    for p in model.parameters():
        return str(p.device)
    return "cpu"


def apply_backend(
    model: nn.Module,
    choice_or_name: BackendChoice | str,
    skip_names: Iterable[str],
    min_width: int,
    weight_fmt: str = "nvfp4_2d",
    act_fmt: str | None = "nvfp4",
    calibration: Callable[[], torch.Tensor] | None = None,
) -> QuantReport:
    """Make ``model`` the explore copy in place, with the given backend; return the report.

    A name is resolved for the model's device first (``resolve_backend``). Skip names and the minimum width
    apply to every backend (the sensitive layers stay in the model's own precision); each backend adds its
    GEMM shape rule (NVFP4 emulation: in_features % 16; FP8 and TE NVFP4: in and out % 16; bf16: none).
    ``weight_fmt``/``act_fmt`` are the NVFP4 layouts ("nvfp4_2d"/"nvfp4"; act_fmt None = weight-only, emulation
    only) and are ignored by fp8*, bf16 and fp32. fp32 replaces nothing and reports every Linear as kept.
    ``calibration``: as in ``quantize_linears`` (output relative error of one fixed forward).
    """
    if isinstance(choice_or_name, BackendChoice):
        choice = choice_or_name
        if choice.name not in CONCRETE_BACKENDS:
            raise SolrlError(f"backend choice {choice.name!r} is not a concrete backend; resolve it first")
    else:
        choice = resolve_backend(choice_or_name, _model_device(model))
    skip_names = list(skip_names)
    if choice.name == "fp32":
        report = QuantReport(
            weight_fmt=None, act_fmt=None, min_width=min_width, skip_names=skip_names,
            backend=choice.name, backend_reason=choice.reason,
        )
        for name, lin in _linears(model):
            report.layers.append(
                LayerRow(name, lin.in_features, lin.out_features, False, "fp32 backend: full precision, nothing replaced")
            )
        if calibration is not None:
            report.calibration_rel_error = 0.0
        return report
    factory, shape_rule, wfmt, afmt = _factory(choice, weight_fmt, act_fmt)
    return replace_linears(
        model,
        skip_names,
        min_width,
        factory,
        shape_rule=shape_rule,
        calibration=calibration,
        weight_fmt=wfmt,
        act_fmt=afmt,
        backend=choice.name,
        backend_reason=choice.reason,
    )
