"""Swap a model's nn.Linear layers for NVFP4-emulated ones (the explore copy's "quantize" step).

Emulation means quantize–dequantize, then an ordinary ``F.linear``: the numerics of an NVFP4 GEMM
(up to fp32 accumulation order), none of its speed. Inference only: the quantizer has no gradient.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from solrl_core.models.quant.nvfp4 import BLOCK, FORMATS, quantize_dequantize


def rel_error_tensor(approx: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """‖approx − ref‖ / ‖ref‖ in float64 as a 0-dim tensor on their device, computed without a host sync (0 when both
    are zero, inf when only ref is; not finite when either holds a NaN or ±inf)."""
    ref64, approx64 = ref.detach().double(), approx.detach().double()
    num, den = (approx64 - ref64).norm(), ref64.norm()
    zero_ref = torch.where(num == 0, torch.zeros_like(num), torch.full_like(num, math.inf))
    return torch.where(den == 0, zero_ref, num / den)


def _rel_error(approx: torch.Tensor, ref: torch.Tensor) -> float:
    """``rel_error_tensor`` read back as a float (one host sync)."""
    return rel_error_tensor(approx, ref).item()


class WeightErrorMixin:
    """``weight_rel_error`` = ‖Ŵ − W‖ / ‖W‖ of an explore-copy layer's stored weight, kept on the device.

    ``load_source`` sets ``weight_rel_error_tensor`` (``rel_error_tensor``: no host sync, so quantizing a model does
    not wait on the GPU once per layer); ``weight_rel_error`` reads it back as a float (one sync per read;
    ``read_weight_errors`` reads many layers' at once). A source weight with NaN or ±inf gives a non-finite error:
    that is how ``read_weight_errors`` checks the weights, once per model rather than once per layer.
    """

    weight_rel_error_tensor: torch.Tensor | None = None

    @property
    def weight_rel_error(self) -> float | None:
        t = self.weight_rel_error_tensor
        return None if t is None else t.item()


def read_back(scalars: Sequence[torch.Tensor]) -> list:
    """The values of 0-dim tensors as Python numbers, with one device-to-host transfer (one host sync) per device
    rather than one per tensor (the tensors of one device are stacked, so their dtypes are promoted together)."""
    values: list = [None] * len(scalars)
    by_device: dict[torch.device, list[int]] = {}
    for i, t in enumerate(scalars):
        by_device.setdefault(t.device, []).append(i)
    for idx in by_device.values():
        for i, value in zip(idx, torch.stack([scalars[i] for i in idx]).cpu().tolist()):
            values[i] = value
    return values


def read_weight_errors(layers: Sequence[tuple[str, nn.Module]]) -> list[float | None]:
    """The ``weight_rel_error`` of each (name, layer), read back with one host sync per device (not one per layer).

    A layer without ``weight_rel_error_tensor`` gives its ``weight_rel_error`` attribute, or None. Raises ValueError
    naming the layers whose error is not finite: their source weight holds NaN or ±inf (or values beyond float32
    range) — the build-time check of the quantized weights.
    """
    errors: list[float | None] = []
    on_device: list[int] = []
    for i, (_, layer) in enumerate(layers):
        t = getattr(layer, "weight_rel_error_tensor", None)
        if isinstance(t, torch.Tensor):
            on_device.append(i)
        errors.append(None if isinstance(t, torch.Tensor) else getattr(layer, "weight_rel_error", None))
    for i, value in zip(on_device, read_back([layers[i][1].weight_rel_error_tensor for i in on_device])):
        errors[i] = value
    bad = [layers[i][0] for i, e in enumerate(errors) if e is not None and not math.isfinite(e)]
    if bad:
        shown = ", ".join(repr(n) for n in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise ValueError(f"cannot quantize layer {shown}: its weight has non-finite values (NaN or ±inf, or beyond "
                         "float32 range)")
    return errors


class NVFP4EmulatedLinear(WeightErrorMixin, nn.Module):
    """A Linear whose weight is NVFP4-rounded once and whose input is NVFP4-rounded at every call.

    Built from an ``nn.Linear`` (same in/out features, dtype, device, bias). ``weight_fmt`` defaults to
    ``"nvfp4_2d"`` (16×16 weight tiles, Transformer Engine's recipe); ``act_fmt`` to ``"nvfp4"``
    (1×16 blocks along in_features, one global scale per activation tensor, i.e. per call — so, as on
    the real hardware, a sample's rounding depends slightly on the rest of its batch). ``act_fmt=None``
    gives weight-only quantization. The rounded weight is a frozen Parameter (no grad), stored in the
    source weight's dtype. ``load_source(weight, bias)`` re-quantizes from new full-precision weights
    (the LoRA sync), bit-identical to building the layer afresh from them. Neither writes into the source's
    tensors. The forward never syncs with the device: it does not check its input for NaN/±inf, which give a NaN
    output (see ``quantize_dequantize``); the weight is checked through ``weight_rel_error`` (``read_weight_errors``).
    """

    def __init__(self, linear: nn.Linear, weight_fmt: str = "nvfp4_2d", act_fmt: str | None = "nvfp4"):
        super().__init__()
        if weight_fmt not in FORMATS:
            raise ValueError(f"weight_fmt must be one of {FORMATS}, got {weight_fmt!r}")
        if act_fmt not in ("nvfp4", None):
            raise ValueError(f"act_fmt must be 'nvfp4' (1×16 along in_features) or None, got {act_fmt!r}")
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weight_fmt = weight_fmt
        self.act_fmt = act_fmt
        self.source_dtype = linear.weight.dtype
        w = linear.weight.detach()
        self.weight = nn.Parameter(_placeholder(w), requires_grad=False)
        if linear.bias is not None:
            self.bias = nn.Parameter(_placeholder(linear.bias.detach()), requires_grad=False)
        else:
            self.register_parameter("bias", None)
        self.load_source(w, linear.bias)

    @torch.no_grad()
    def load_source(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        """Quantize ``weight`` (out × in, full precision) into this layer and copy ``bias``."""
        w = _source(weight, self.weight, self.source_dtype, (self.out_features, self.in_features))
        w_q = quantize_dequantize(w, self.weight_fmt, check_finite=False)
        self.weight_rel_error_tensor = rel_error_tensor(w_q, w)
        self.weight.data = w_q
        _load_bias(self, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.act_fmt is not None:
            x = quantize_dequantize(x, self.act_fmt, check_finite=False)
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, weight_fmt={self.weight_fmt}, act_fmt={self.act_fmt}"
        )


def _placeholder(like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """An empty tensor on ``like``'s device that ``load_source`` replaces: a layer under construction never holds a
    second full-size weight beside the one it quantizes."""
    return like.new_empty(0, dtype=dtype)


def _source(weight: torch.Tensor, like: torch.Tensor, dtype: torch.dtype, shape: tuple[int, int]) -> torch.Tensor:
    """``weight`` detached, on ``like``'s device, in the layer's source dtype; shape-checked."""
    if tuple(weight.shape) != shape:
        raise ValueError(f"weight of shape {tuple(weight.shape)} does not fit a layer of shape {shape}")
    return weight.detach().to(device=like.device, dtype=dtype)


def _load_bias(layer: nn.Module, bias: torch.Tensor | None) -> None:
    """Copy ``bias`` into ``layer.bias`` (same dtype and device), or check both are absent."""
    if (bias is None) != (layer.bias is None):
        raise ValueError(f"bias mismatch: layer has bias={layer.bias is not None}, source has bias={bias is not None}")
    if bias is not None:
        layer.bias.data = bias.detach().to(device=layer.bias.device, dtype=layer.bias.dtype).clone()


def explore_rule(quant, defaults) -> tuple[list[str], int]:
    """(skip names, min width) of the explore copy: the run's `quant.skip_names` / `quant.min_width` where set, else
    the backbone's defaults (`backbone.defaults`)."""
    skip = quant.skip_names if quant.skip_names is not None else defaults.quant_skip_names
    min_width = quant.min_width if quant.min_width is not None else defaults.quant_min_width
    return skip, min_width


def skip_match(name: str, skip_names: Iterable[str]) -> str | None:
    """The first skip name that occurs in the dotted module ``name`` as a plain substring, or None.

    The reference implementation's rule (NVlabs/Sana ``train_scripts/train_utils.py``, ``replace_linear_with_te``:
    a Linear stays in high precision when any pattern is a substring of its qualified name). Case-sensitive, no
    regard for dots: "norm1" matches "transformer_blocks.0.norm1_context.linear", "attn" matches "attn2.to_q",
    "x_embedder" matches "x_embedder" but not "context_embedder". An empty skip name (which would match every layer)
    is rejected.
    """
    for skip in skip_names:
        if not skip:
            raise ValueError("invalid skip name '': it would keep every layer in high precision")
        if skip in name:
            return skip
    return None


ShapeRule = Callable[[nn.Linear], "str | None"]


def nvfp4_shape_rule(linear: nn.Linear) -> str | None:
    """NVFP4 GEMMs reduce over whole 16-element blocks: in_features must be a multiple of 16."""
    if linear.in_features % BLOCK != 0:
        return f"in_features {linear.in_features} is not a multiple of {BLOCK} (NVFP4 GEMM blocks)"
    return None


def fp8_shape_rule(linear: nn.Linear) -> str | None:
    """FP8 GEMMs (cuBLASLt, Transformer Engine) need in_features and out_features multiples of 16."""
    if linear.in_features % 16 != 0 or linear.out_features % 16 != 0:
        return f"in/out features {linear.in_features}/{linear.out_features} are not multiples of 16 (FP8 GEMM)"
    return None


def any_shape(linear: nn.Linear) -> str | None:
    """No shape requirement (bf16)."""
    return None


def _keep_reason(
    name: str, linear: nn.Linear, skip_names: list[str], min_width: int, shape_rule: ShapeRule = nvfp4_shape_rule
) -> str | None:
    """Why ``linear`` stays in high precision (None if it is to be quantized). First rule wins."""
    skip = skip_match(name, skip_names)
    if skip is not None:
        return f"skip name {skip!r}"
    width = max(linear.in_features, linear.out_features)
    if width <= min_width:
        return f"max(in, out) = {width} <= min_width {min_width}"
    return shape_rule(linear)


def _iter_linears(model: nn.Module) -> Iterator[tuple[str, nn.Linear]]:
    # remove_duplicate=False: a Linear registered under two names is reported (and swapped) under both.
    return ((n, m) for n, m in model.named_modules(remove_duplicate=False) if isinstance(m, nn.Linear))


def _linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    return list(_iter_linears(model))


def _layer_rows(model: nn.Module, skip_names: list[str], min_width: int, shape_rule: ShapeRule) -> list["LayerRow"]:
    """One row per nn.Linear name of ``model``, saying whether it is to be replaced and why (holds no module)."""
    rows = []
    for name, linear in _iter_linears(model):
        reason = _keep_reason(name, linear, skip_names, min_width, shape_rule)
        rows.append(LayerRow(name, linear.in_features, linear.out_features, reason is None, reason or "eligible"))
    return rows


def eligible_linears(
    model: nn.Module, skip_names: Iterable[str], min_width: int, shape_rule: ShapeRule = nvfp4_shape_rule
) -> list[str]:
    """Dotted names of the nn.Linear modules ``quantize_linears`` would replace (model untouched).

    Works on a model built on the meta device (no weights are read). ``shape_rule`` is the backend's
    shape requirement (default: NVFP4's, in_features a multiple of 16).
    """
    return [r.name for r in _layer_rows(model, list(skip_names), min_width, shape_rule) if r.replaced]


@dataclass
class LayerRow:
    """One nn.Linear of the model. ``weight_rel_error`` = ‖Ŵ − W‖ / ‖W‖, None for kept layers."""

    name: str
    in_features: int
    out_features: int
    replaced: bool
    reason: str
    weight_rel_error: float | None = None


@dataclass
class QuantReport:
    """What ``quantize_linears`` did.

    Parameter totals count weight elements (in × out) and leave biases out, so the low-precision
    share equals the share of per-token Linear FLOPs. ``calibration_rel_error`` is
    ‖y_quant − y_fp‖ / ‖y_fp‖ of the calibration callable's output, when one was given.
    """

    layers: list[LayerRow] = field(default_factory=list)
    weight_fmt: str | None = "nvfp4_2d"
    act_fmt: str | None = "nvfp4"
    min_width: int = 0
    skip_names: list[str] = field(default_factory=list)
    calibration_rel_error: float | None = None
    backend: str | None = None
    backend_reason: str | None = None

    @property
    def n_replaced(self) -> int:
        return sum(r.replaced for r in self.layers)

    @property
    def n_kept(self) -> int:
        return len(self.layers) - self.n_replaced

    @property
    def params_total(self) -> int:
        return sum(r.in_features * r.out_features for r in self.layers)

    @property
    def params_low_precision(self) -> int:
        return sum(r.in_features * r.out_features for r in self.layers if r.replaced)

    @property
    def low_precision_share(self) -> float:
        total = self.params_total
        return self.params_low_precision / total if total else 0.0

    def totals(self) -> dict:
        return {
            "layers": len(self.layers),
            "layers_replaced": self.n_replaced,
            "layers_kept": self.n_kept,
            "linear_params_total": self.params_total,
            "linear_params_low_precision": self.params_low_precision,
            "low_precision_share": self.low_precision_share,
            "calibration_rel_error": self.calibration_rel_error,
        }

    def to_dict(self) -> dict:
        """Plain JSON-able data: the settings, one dict per layer, and the totals.

        A non-finite error (an all-zero calibration output, say) becomes None, so the result is
        strict JSON.
        """
        totals = self.totals()
        err = totals["calibration_rel_error"]
        if err is not None and not math.isfinite(err):
            totals["calibration_rel_error"] = None
        return {
            "backend": self.backend,
            "backend_reason": self.backend_reason,
            "weight_fmt": self.weight_fmt,
            "act_fmt": self.act_fmt,
            "min_width": self.min_width,
            "skip_names": list(self.skip_names),
            "layers": [asdict(r) for r in self.layers],
            "totals": totals,
        }


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    if not name:
        raise ValueError("the model is itself an nn.Linear: wrap it in a container to swap it in place")
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


@torch.no_grad()
def replace_linears(
    model: nn.Module,
    skip_names: Iterable[str],
    min_width: int,
    factory: Callable[[str, nn.Linear], nn.Module],
    *,
    shape_rule: ShapeRule = nvfp4_shape_rule,
    calibration: Callable[[], torch.Tensor] | None = None,
    weight_fmt: str | None = None,
    act_fmt: str | None = None,
    backend: str | None = None,
    backend_reason: str | None = None,
) -> QuantReport:
    """Replace the eligible nn.Linear modules of ``model`` in place by ``factory(name, linear)``.

    The general form behind every backend (and handy for experiments, e.g. a deliberately broken
    quantizer). A Linear stays in high precision when (first rule wins, the reason is recorded): a skip
    name matches its dotted name (see ``skip_match``); max(in_features, out_features) <= min_width; or
    ``shape_rule(linear)`` returns a reason. A Linear registered under several names is built once.
    ``calibration``: see ``quantize_linears``.

    Memory: the layers are replaced one at a time and nothing here keeps a replaced source Linear alive (the
    built layer of a Linear registered under several names is remembered in a weak mapping, only while that
    Linear lives), so the peak is the model plus the layers built so far, less the sources already replaced and
    freed — unless the caller holds them. ``factory`` must not write into the source's tensors in place: every
    backend's layer reads its source and builds new tensors (``BF16Linear`` may share a bf16 source's weight
    tensor, never writing into it), so a copy whose tensors are shared with a base model leaves that model intact.

    Host syncs: none per layer. The report's ``weight_rel_error`` per layer is the new module's, read back from
    the device once at the end (``read_weight_errors``), which also raises ValueError, naming the layers, when a
    replaced layer's weight holds NaN or ±inf.
    """
    skip_names = list(skip_names)
    if calibration is not None:
        reference = calibration()
        if not isinstance(reference, torch.Tensor):
            raise TypeError(f"calibration must return a tensor, got {type(reference).__name__}")
        reference = reference.detach().clone()
    report = QuantReport(
        weight_fmt=weight_fmt,
        act_fmt=act_fmt,
        min_width=min_width,
        skip_names=skip_names,
        backend=backend,
        backend_reason=backend_reason,
    )
    report.layers = _layer_rows(model, skip_names, min_width, shape_rule)
    built: weakref.WeakKeyDictionary[nn.Module, nn.Module] = weakref.WeakKeyDictionary()
    replaced: list[tuple[LayerRow, nn.Module]] = []
    for row in report.layers:
        if not row.replaced:
            continue
        source = model.get_submodule(row.name)
        new = built.get(source)
        if new is None:
            new = built[source] = factory(row.name, source)
        _set_submodule(model, row.name, new)
        del source  # the model no longer holds it under this name: let it go before the next layer is built
        replaced.append((row, new))
    errors = read_weight_errors([(row.name, new) for row, new in replaced])
    for (row, _), error in zip(replaced, errors):
        row.weight_rel_error = error
    if calibration is not None:
        report.calibration_rel_error = _rel_error(calibration(), reference)
    return report


def quantize_linears(
    model: nn.Module,
    skip_names: Iterable[str],
    min_width: int,
    weight_fmt: str = "nvfp4_2d",
    act_fmt: str | None = "nvfp4",
    calibration: Callable[[], torch.Tensor] | None = None,
) -> QuantReport:
    """Replace the eligible nn.Linear modules of ``model`` in place by ``NVFP4EmulatedLinear``.

    A Linear stays in high precision when (first rule wins, the reason is recorded): a skip name
    matches its dotted name (see ``skip_match``); max(in_features, out_features) <= min_width; or
    in_features is not a multiple of 16 (the reduction dim must hold whole NVFP4 blocks, as real
    NVFP4 GEMMs require). ``calibration``, if given, is a zero-argument callable that runs a forward
    of the model on fixed inputs and returns a tensor; it is run before and after the swap (under
    no_grad) and the relative error of its output is recorded; it must be deterministic. Layers
    that are already ``NVFP4EmulatedLinear`` are not nn.Linear and do not appear in the report.
    """
    return replace_linears(
        model,
        skip_names,
        min_width,
        lambda _name, linear: NVFP4EmulatedLinear(linear, weight_fmt, act_fmt),
        shape_rule=nvfp4_shape_rule,
        calibration=calibration,
        weight_fmt=weight_fmt,
        act_fmt=act_fmt,
    )
