"""Explore-copy Linear replacements other than NVFP4 emulation: FP8 (emulated, and real through
``torch._scaled_mm``) and bf16.

Every layer here, like ``NVFP4EmulatedLinear``, is built from an ``nn.Linear``, holds frozen parameters, has
``in_features``/``out_features``, a ``weight_rel_error`` (‖Ŵ − W‖ / ‖W‖ of its stored weight) and a
``load_source(weight, bias)`` method that re-quantizes from new full-precision weights exactly as building the
layer afresh would (used by the LoRA sync, ``requantize_changed``). Inference only: no gradients.

Building a layer or calling ``load_source`` never writes into the source's tensors; the weight error is kept on the
device (``WeightErrorMixin``) and no forward reads anything back from the device (no per-call host sync).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from solrl_core.models.quant.fp8 import fp8_encode, fp8_encode_activation, fp8_qdq_activation, fp8_quantize_dequantize
from solrl_core.models.quant.linear import WeightErrorMixin, _load_bias, _placeholder, _source, rel_error_tensor


class _FrozenLinearBase(WeightErrorMixin, nn.Module):
    """Shape, dtype and bias bookkeeping shared by the replacements."""

    def _init_from(self, linear: nn.Linear, bias_dtype: torch.dtype | None = None) -> None:
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.source_dtype = linear.weight.dtype
        if linear.bias is not None:
            self.bias = nn.Parameter(_placeholder(linear.bias.detach(), bias_dtype), requires_grad=False)
        else:
            self.register_parameter("bias", None)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class FP8EmulatedLinear(_FrozenLinearBase):
    """FP8 E4M3 emulation: the weight is rounded once with one per-tensor scale (amax/448), the input at every
    call with one scale per activation tensor (i.e. per call, as FP8 current scaling does), then an ordinary
    ``F.linear`` in the source dtype. The numerics of an FP8 GEMM up to accumulation order, none of its speed.
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self._init_from(linear)
        w = linear.weight.detach()
        self.weight = nn.Parameter(_placeholder(w), requires_grad=False)
        self.load_source(w, linear.bias)

    @torch.no_grad()
    def load_source(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        w = _source(weight, self.weight, self.source_dtype, (self.out_features, self.in_features))
        w_q = fp8_quantize_dequantize(w, check_finite=False)
        self.weight_rel_error_tensor = rel_error_tensor(w_q, w)
        self.weight.data = w_q
        _load_bias(self, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(fp8_qdq_activation(x), self.weight, self.bias)

    def extra_repr(self) -> str:
        return super().extra_repr() + ", fmt=fp8 (emulated)"


class ScaledMMFP8Linear(_FrozenLinearBase):
    """Real FP8 through ``torch._scaled_mm``: E4M3 weight codes and per-tensor decode scale stored once, the
    input quantized per call (per-tensor, current scaling), one FP8 GEMM with float32 scales, the bias added
    in the output dtype. Same rounding as ``FP8EmulatedLinear``; the output differs from it only by the
    order in which the two decode scales and the accumulation are applied (float32 rounding).

    On CUDA, ``torch._scaled_mm`` needs an FP8-capable GPU (sm_89+) and in/out features that are multiples
    of 16 (the backend's shape rule). torch 2.14 also runs it on CPU, which the tests use.
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self._init_from(linear)
        w = linear.weight.detach()
        self.register_buffer("weight_fp8", torch.empty(w.shape, dtype=torch.float8_e4m3fn, device=w.device))
        self.register_buffer("weight_scale_inv", torch.ones((), dtype=torch.float32, device=w.device))
        self.load_source(w, linear.bias)

    @torch.no_grad()
    def load_source(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        w = _source(weight, self.weight_fp8, self.source_dtype, (self.out_features, self.in_features))
        codes, S = fp8_encode(w, check_finite=False)
        self.weight_fp8.copy_(codes)
        self.weight_scale_inv.copy_(1.0 / S)
        self.weight_rel_error_tensor = rel_error_tensor(codes.float() * self.weight_scale_inv, w)
        _load_bias(self, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        codes, S = fp8_encode_activation(x2)  # no float32 copy of the input (solrl_core/models/quant/fp8.py)
        y = torch._scaled_mm(
            codes.contiguous(),  # (tokens, in), row-major
            self.weight_fp8.t(),  # (in, out), column-major as the GEMM wants
            scale_a=(1.0 / S).to(x.device),
            scale_b=self.weight_scale_inv,
            out_dtype=torch.float32,
        )
        if self.bias is not None:
            y.add_(self.bias.float())  # in place: the float32 output is the only one
        return y.to(x.dtype).reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return super().extra_repr() + ", fmt=fp8 (torch._scaled_mm)"


class BF16Linear(_FrozenLinearBase):
    """bf16 compute: weight and bias stored in bf16, input cast to bf16, output rounded to bf16 and cast back
    to the input dtype. On CUDA the GEMM runs natively in bf16 (fp32 accumulation); elsewhere it is emulated
    (the bf16 values multiplied in float32, then rounded) — CPUs without native bf16 are slow at bf16 GEMMs.
    A bf16 source weight is not copied: the layer shares its tensor (and never writes into it).
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self._init_from(linear, bias_dtype=torch.bfloat16)
        w = linear.weight.detach()
        self.weight = nn.Parameter(_placeholder(w, torch.bfloat16), requires_grad=False)
        self.load_source(w, linear.bias)

    @torch.no_grad()
    def load_source(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        w = _source(weight, self.weight, self.source_dtype, (self.out_features, self.in_features))
        w_q = w.to(torch.bfloat16)
        self.weight_rel_error_tensor = rel_error_tensor(w_q, w)
        self.weight.data = w_q
        _load_bias(self, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xb = x.to(torch.bfloat16)
        if x.is_cuda:
            y = F.linear(xb, self.weight, self.bias)
        else:
            b = None if self.bias is None else self.bias.float()
            y = F.linear(xb.float(), self.weight.float(), b).to(torch.bfloat16)
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return super().extra_repr() + ", compute=bf16"
