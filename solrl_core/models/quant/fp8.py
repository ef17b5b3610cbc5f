"""FP8 E4M3 with one per-tensor FP32 scale (the numerics of FP8 current scaling), as quantize–dequantize.

Format: elements are FP8 E4M3 ("fn": 1 sign, 4 exponent bits with bias 7, 3 mantissa bits, subnormals down to
2⁻⁹, largest finite 448, no inf). One FP32 scale per tensor maps the tensor's amax onto 448.

Order of the float32 arithmetic (that of Transformer Engine's ``Float8CurrentScaling`` recipe, the FP8 path
this emulates, and of ``torch._scaled_mm``'s decode scales):

* encode scale ``S = min(448 / amax, FLT_MAX)`` (1 when amax is 0), rounded once to float32;
* ``q = e4m3(clamp(x · S, ±448))``: round to nearest, ties to even (torch's ``float8_e4m3fn`` cast), with
  saturation made explicit by the clamp (an overflowing cast is not guaranteed to saturate on every backend);
* decode ``x̂ = q · S⁻¹`` with ``S⁻¹ = fp32(1 / S)`` — the per-tensor "scale_inv" that FP8 GEMMs take. The
  decode scale is therefore amax/448 up to one float32 rounding.

A tensor whose amax is below 448 / FLT_MAX (~1.3e-36) gets S capped at FLT_MAX; values then round as far as
float32 allows. Non-finite input raises ValueError, unless ``check_finite=False`` (a layer's per-call activation
path: no host sync; a NaN or ±inf input then gives a NaN output, see ``as_float32``).

Activations (``fp8_encode_activation``, ``fp8_qdq_activation``: what an explore copy's FP8 layers run per call)
take the same arithmetic without a float32 copy of the whole input: the amax is read in the input's own dtype
(``aminmax``: exact, the largest magnitude is one of the input's values), and the float32 scaling, clamping and
rounding run on chunks of at most ``CHUNK_ELEMENTS`` elements. Their temporaries are one chunk's (16 MiB of float32)
whatever the batch, where a whole-tensor float32 path holds three float32 copies of the input at its peak (FLUX.1's
explore batch: GiBs per layer call). The codes, and so the outputs, are the same bit for bit.
"""

from __future__ import annotations

import torch

from solrl_core.models.quant.numerics import E4M3_MAX, as_float32

_FLT_MAX = torch.finfo(torch.float32).max


def fp8_scale(amax: torch.Tensor) -> torch.Tensor:
    """Per-tensor encode scale S = 448 / amax as float32, capped at FLT_MAX, and 1 when amax is 0."""
    amax = torch.as_tensor(amax, dtype=torch.float32)
    s = torch.full_like(amax, E4M3_MAX) / amax  # made on amax's device: no host-to-device copy
    s = s.clamp(max=_FLT_MAX)
    return torch.where(amax == 0, torch.ones_like(s), s)


def fp8_encode(x: torch.Tensor, check_finite: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode ``x`` to FP8: ``(codes, scale)``.

    ``codes`` is a ``torch.float8_e4m3fn`` tensor of ``x``'s shape; ``scale`` the float32 0-dim encode scale S
    (the decode scale, what FP8 GEMMs call ``scale_inv``, is ``1 / S``). ``check_finite=False`` skips the
    NaN/inf check (a device sync on GPUs) for hot inference paths.
    """
    x32 = as_float32(x, "fp8_encode", check_finite)
    if x32.numel() == 0:
        return x32.to(torch.float8_e4m3fn), x32.new_ones(())
    S = fp8_scale(x32.abs().amax())
    q = (x32 * S).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, S


def fp8_decode(codes: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """Decode FP8 to float32: ``codes · fp32(1 / scale)``."""
    S = torch.as_tensor(scale, dtype=torch.float32, device=codes.device)
    return codes.to(torch.float32) * (1.0 / S)


def fp8_quantize_dequantize(x: torch.Tensor, check_finite: bool = True) -> torch.Tensor:
    """Fake-quantize ``x`` to per-tensor-scaled FP8 E4M3 and back; same shape and dtype out.

    ``check_finite=False``: no NaN/inf check (no host sync), as in a layer's forward; see the module docstring.
    """
    codes, S = fp8_encode(x, check_finite)
    return fp8_decode(codes, S).to(x.dtype)


CHUNK_ELEMENTS = 1 << 22  # float32 elements of the activation paths' one temporary (16 MiB)


def _activation_scale(x: torch.Tensor) -> torch.Tensor:
    """S for ``x`` from its amax read in its own dtype: no float32 copy (aminmax: no |x| temporary either)."""
    low, high = torch.aminmax(x.detach())
    return fp8_scale(torch.maximum(high.to(torch.float32), low.to(torch.float32).neg()))


def _matrix(x: torch.Tensor, what: str) -> torch.Tensor | None:
    """``x`` as a (rows, last dim) view for the activation paths; None when it is empty. TypeError unless float."""
    if not x.is_floating_point():
        raise TypeError(f"{what} needs a floating-point tensor, got {x.dtype}")
    if x.numel() == 0:
        return None
    return x.reshape(-1, x.shape[-1]) if x.dim() else x.reshape(1, 1)


def _row_chunks(rows: int, cols: int):
    """Row ranges of a (rows, cols) matrix holding at most CHUNK_ELEMENTS elements each (one row at least)."""
    step = max(1, CHUNK_ELEMENTS // max(cols, 1))
    return ((a, min(a + step, rows)) for a in range(0, rows, step))


def _scaled_chunk(x: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """clamp(x · S, ±448) in float32 for one chunk: a float32 copy scaled and clamped in place."""
    return x.detach().to(torch.float32, copy=True).mul_(S).clamp_(-E4M3_MAX, E4M3_MAX)


def fp8_encode_activation(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``fp8_encode(x, check_finite=False)`` (the same codes and scale) with one chunk's float32 temporary (module
    docstring); the codes have ``x``'s shape."""
    flat = _matrix(x, "fp8_encode_activation")
    if flat is None:
        return x.detach().to(torch.float8_e4m3fn), torch.ones((), dtype=torch.float32, device=x.device)
    S = _activation_scale(x)
    codes = torch.empty(flat.shape, dtype=torch.float8_e4m3fn, device=x.device)
    for a, b in _row_chunks(*flat.shape):
        codes[a:b].copy_(_scaled_chunk(flat[a:b], S))  # the cast rounds to nearest, ties to even, as .to() does
    return codes.reshape(x.shape), S


def fp8_qdq_activation(x: torch.Tensor) -> torch.Tensor:
    """``fp8_quantize_dequantize(x, check_finite=False)`` (bit for bit) with one chunk's temporaries: each chunk is
    encoded, decoded and written into the output in ``x``'s dtype."""
    flat = _matrix(x, "fp8_qdq_activation")
    if flat is None:
        return x.detach().clone()
    S = _activation_scale(x)
    inverse = 1.0 / S
    out = torch.empty(flat.shape, dtype=x.dtype, device=x.device)
    for a, b in _row_chunks(*flat.shape):
        chunk = _scaled_chunk(flat[a:b], S)
        chunk.copy_(chunk.to(torch.float8_e4m3fn))  # rounded to E4M3, back in float32
        out[a:b].copy_(chunk.mul_(inverse))
        del chunk  # before the next chunk is made: one float32 chunk alive at a time
    return out.reshape(x.shape)
