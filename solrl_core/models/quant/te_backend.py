"""The Transformer Engine path: eligible nn.Linear layers become ``te.Linear`` run under a TE recipe.

* ``nvfp4``: ``NVFP4BlockScaling`` for inference — weights in 2-D 16×16 tiles (``weight_fmt="nvfp4_2d"``;
  ``"nvfp4"`` sets ``disable_2d_quantization`` for 1×16 weight blocks), activations in 1×16 blocks with
  round-to-nearest, E4M3 block scales and an FP32 per-tensor scale. The random Hadamard transform and
  stochastic rounding are switched off explicitly (``disable_rht=True``, ``disable_stochastic_rounding=True``):
  in TE they only touch the column-wise/gradient operands anyway, but an explore copy must not depend on that.
  Real NVFP4 GEMMs need a Blackwell GPU (sm_100+).
* ``fp8``: ``Float8CurrentScaling`` with ``Format.E4M3`` — per-tensor scales from the current amax (amax/448),
  the numerics of ``quantize_dequantize(x, "fp8")``. Needs sm_89+ (Ada, Hopper, Blackwell).

Transformer Engine is imported lazily, never at module import: it cannot even be installed without CUDA, cuDNN,
NCCL and an NVIDIA driver (the ``gpu`` extra in pyproject.toml). ``import_te`` is the single import point (tests
replace it with a fake).

Each ``TELinear`` enters ``te.autocast`` (Transformer Engine 2.9 or newer: ``TE_MIN_VERSION``) around its own GEMM, so
the rest of the model runs unchanged and no model-wide context is needed. TE's FP8/FP4 Linear wants the
token count to be a multiple of 16: inputs are flattened to (tokens, in_features), zero-padded to a multiple
of ``TE_ROW_ALIGN`` rows and cropped back (zero rows never change an amax).
"""

from __future__ import annotations

import re

import torch
from torch import nn

from solrl_core.errors import SolrlError
from solrl_core.models.quant.linear import WeightErrorMixin, _load_bias, _source, rel_error_tensor
from solrl_core.models.quant.nvfp4 import quantize_dequantize

TE_ROW_ALIGN = 16
TE_KINDS = ("nvfp4", "fp8")


def import_te():
    """``(transformer_engine.pytorch, transformer_engine.common.recipe)``; raises whatever the import raises."""
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe

    return te, recipe


TE_MIN_VERSION = (2, 9)  # te.autocast, te.is_fp8_available, te.is_nvfp4_available (not in 2.8); the gpu extra


def installed_te_version() -> str | None:
    """The installed transformer-engine's version from its package metadata (imports nothing), or None."""
    from importlib import metadata

    for dist in ("transformer_engine", "transformer_engine_torch"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_te_version(found: str | None = None) -> None:
    """A SolrlError when the installed transformer-engine (`found`, else `installed_te_version()`) is older than
    TE_MIN_VERSION; nothing when none is installed or its version does not start with MAJOR.MINOR."""
    found = found if found is not None else installed_te_version()
    release = re.match(r"(\d+)\.(\d+)", found or "")
    if release is None or tuple(map(int, release.groups())) >= TE_MIN_VERSION:
        return
    need = ".".join(map(str, TE_MIN_VERSION))
    raise SolrlError(f"transformer-engine {found} is installed, solrl needs {need} or newer: pip install "
                     f"'transformer-engine[pytorch]>={need}' (or uninstall it, or use explore precision "
                     "nvfp4_emulated)")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def te_support(kind: str) -> tuple[bool, str]:
    """Can Transformer Engine run ``kind`` ("nvfp4" or "fp8") here? ``(ok, reason)``; never raises.

    Asks TE itself (``is_nvfp4_available`` / ``is_fp8_available``), which checks the GPU, CUDA and cuBLAS.
    """
    if kind not in TE_KINDS:
        raise ValueError(f"kind must be one of {TE_KINDS}, got {kind!r}")
    try:
        te, _ = import_te()
    except Exception as exc:  # ImportError, or OSError/RuntimeError from a broken CUDA setup
        return False, f"transformer-engine is not importable ({type(exc).__name__}: {_one_line(exc)[:160]})"
    check = getattr(te, "is_nvfp4_available" if kind == "nvfp4" else "is_fp8_available", None)
    if check is None:
        return False, f"this transformer-engine has no {kind.upper()} support (too old)"
    try:
        result = check(return_reason=True)
    except TypeError:
        result = check()
    except Exception as exc:
        return False, f"transformer-engine {kind} check failed ({type(exc).__name__}: {_one_line(exc)[:160]})"
    ok, reason = result if isinstance(result, tuple) else (result, "")
    return bool(ok), _one_line(reason)


def make_recipe(kind: str, weight_fmt: str = "nvfp4_2d"):
    """The TE recipe of an explore copy: NVFP4 block scaling for inference, or FP8 E4M3 current scaling."""
    _, recipe = import_te()
    if kind == "nvfp4":
        if weight_fmt not in ("nvfp4", "nvfp4_2d"):
            raise ValueError(f"weight_fmt must be 'nvfp4' or 'nvfp4_2d' for the NVFP4 recipe, got {weight_fmt!r}")
        try:
            return recipe.NVFP4BlockScaling(
                disable_rht=True,
                disable_stochastic_rounding=True,
                disable_2d_quantization=weight_fmt == "nvfp4",
            )
        except (TypeError, AttributeError) as exc:
            raise SolrlError(
                f"this transformer-engine cannot build an inference NVFP4BlockScaling recipe ({_one_line(exc)}); "
                "upgrade transformer-engine or use explore precision nvfp4_emulated"
            ) from exc
    if kind == "fp8":
        return recipe.Float8CurrentScaling(fp8_format=recipe.Format.E4M3)
    raise ValueError(f"kind must be one of {TE_KINDS}, got {kind!r}")


def te_autocast(te, recipe):
    """``te.autocast(enabled=True, recipe=...)``."""
    return te.autocast(enabled=True, recipe=recipe)


class TELinear(WeightErrorMixin, nn.Module):
    """An nn.Linear's weights in a ``te.Linear`` run under the explore recipe (see the module docstring).

    ``weight_rel_error`` is the emulated weight error (``quantize_dequantize`` of the same format), the error
    TE's quantizer makes with the same numerics, kept on the device (``WeightErrorMixin``). ``load_source`` copies
    new full-precision weights into the ``te.Linear``'s own parameters (never into the source's); TE re-quantizes
    them at the next forward.
    """

    def __init__(self, linear: nn.Linear, kind: str = "nvfp4", weight_fmt: str = "nvfp4_2d"):
        super().__init__()
        te, _ = import_te()
        self.kind = kind
        self.weight_fmt = weight_fmt if kind == "nvfp4" else "fp8"
        self.recipe = make_recipe(kind, weight_fmt)
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.source_dtype = linear.weight.dtype
        self.linear = te.Linear(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            params_dtype=linear.weight.dtype,
            device=linear.weight.device,
        )
        for p in self.linear.parameters():
            p.requires_grad_(False)
        self.load_source(linear.weight, linear.bias)

    @property
    def bias(self):
        return getattr(self.linear, "bias", None) if self._has_bias else None

    @property
    def _has_bias(self) -> bool:
        b = getattr(self.linear, "bias", None)
        return isinstance(b, torch.Tensor) and b.numel() > 0

    @torch.no_grad()
    def load_source(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        w = _source(weight, self.linear.weight, self.source_dtype, (self.out_features, self.in_features))
        self.linear.weight.copy_(w)
        fmt = self.weight_fmt if self.kind == "nvfp4" else "fp8"
        self.weight_rel_error_tensor = rel_error_tensor(quantize_dequantize(w, fmt, check_finite=False), w)
        _load_bias(self, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        te, _ = import_te()
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        n = x2.shape[0]
        pad = (-n) % TE_ROW_ALIGN
        if pad:
            x2 = torch.cat([x2, x2.new_zeros(pad, self.in_features)])
        with te_autocast(te, self.recipe):
            y = self.linear(x2)
        return y[:n].reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, kind={self.kind}, weight_fmt={self.weight_fmt}"
