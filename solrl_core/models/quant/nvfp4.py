"""NVFP4 quantize-dequantize emulation (the numerics of the 4-bit explore copy).

Format (see ``docs/method.md``, "NVFP4, exactly"):

* elements: FP4 E2M1, magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}, round to nearest with ties to even,
  saturating at ±6;
* one FP8 E4M3 scale per block of 16 elements (``"nvfp4"``: 1×16 consecutive elements along the last
  dim, which is the reduction dim of a Linear; ``"nvfp4_2d"``: 16×16 tiles of a 2-D weight, Transformer
  Engine's weight recipe);
* one FP32 scale per tensor on top: S = 448·6 / amax(tensor), S = 1 when amax is 0.

Order of the float32 scale arithmetic. The formulas of docs/method.md fix the maths, not the rounding of the
intermediate float32 results; implementations that order them differently can disagree in the last
bit of an intermediate and, rarely, in a code or block scale. We encode in the order of Transformer
Engine's NVFP4 reference quantizer, which TE's own tests hold byte-exact to its Blackwell kernels
(the recipe this project emulates):

* ``S = min(448·6 / amax, FLT_MAX)`` (1 if amax is 0), and ``S⁻¹ = 1 / S`` rounded once;
* ``s_b = e4m3(min(amax_b · (S · fp32(1/6)), 448))``;
* ``q = e2m1(clamp(x · min(1 / (s_b · S⁻¹), FLT_MAX), ±6))``;
* decode ``x̂ = q · (s_b · S⁻¹)``: the product of the two decode scales is formed first, as
  torchao's ``NVFP4Tensor.dequantize`` does, so our decoded floats are bitwise equal to torchao's
  when it is given ``per_tensor_scale = S⁻¹``. (A real NVFP4 GEMM applies the global scales once,
  after accumulating, so emulation matches it only up to float32 rounding.)

Padding rule. A last dim (and, for ``"nvfp4_2d"``, a row count) that is not a multiple of 16 is
zero-padded to the next multiple of 16 and the result cropped back. Zeros never change a block's or
the tensor's amax, so the padded positions only complete the last block.

Blocks whose scale is 0 (all-zero blocks, or blocks so small next to the tensor's amax that
``amax_b·S/6`` rounds to 0 in E4M3) decode to exact zeros (codes 0 or 8, no NaN). Unlike torchao, we
do not raise small block scales to E4M3's smallest normal (2⁻⁶): subnormal E4M3 scales are used, as
the format and Transformer Engine allow. A tensor whose amax is below 448·6 / FLT_MAX (~7.9e-36)
gets S capped at FLT_MAX and, like in TE, comes out as zeros.

Host syncs. The public functions check their input for NaN/±inf by default (a flag read back from the device, one
sync); ``check_finite=False`` (a layer's per-call activation path) skips it, and nothing else in
``quantize_dequantize`` reads from the device or copies a constant to it. Unchecked, a NaN or ±inf input gives a
NaN output: the global scale S turns NaN or 0, which poisons every block (and its decode scale).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from solrl_core.models.quant.fp8 import fp8_quantize_dequantize
from solrl_core.models.quant.numerics import E4M3_MAX, as_float32

E2M1_MAX = 6.0
BLOCK = 16
FORMATS = ("nvfp4", "nvfp4_2d")  # the NVFP4 layouts
QDQ_FORMATS = ("nvfp4", "nvfp4_2d", "fp8")  # everything ``quantize_dequantize`` accepts

_FLT_MAX = torch.finfo(torch.float32).max
_INV_E2M1_MAX = torch.tensor(1.0 / E2M1_MAX, dtype=torch.float32)  # fp32(1/6), as in TE

# Decoded value of each 4-bit code: bit 3 sign, bits 2..1 exponent (bias 1), bit 0 mantissa.
E2M1_VALUES = torch.tensor(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=torch.float32,
)

# Midpoints between neighbouring magnitudes, with whether the tie goes UP (to the even code).
_E2M1_MIDPOINTS = (
    (0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False)
)


def e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """4-bit E2M1 codes (uint8, 0..15) of ``x`` rounded to nearest-even, saturating at ±6.

    The sign bit copies the sign bit of ``x`` (so -0.1 and -0.0 give code 8, "-0"), as torchao does.
    ±inf saturate to ±6; NaN raises ValueError.
    """
    x = x.to(torch.float32)
    if bool(torch.isnan(x).any()):
        raise ValueError("e2m1_codes: input has NaN")
    return _e2m1_codes(x)


def _e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """``e2m1_codes`` of a float32 tensor, without the NaN check (no host sync); NaN gives code 0 or 8 (±0)."""
    a = x.abs()
    idx = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for mid, tie_up in _E2M1_MIDPOINTS:
        idx += ((a >= mid) if tie_up else (a > mid)).to(torch.uint8)
    return idx | (torch.signbit(x).to(torch.uint8) << 3)


def e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    """float32 values of 4-bit E2M1 codes (uint8 or integer tensor, 0..15)."""
    return E2M1_VALUES.to(codes.device)[codes.long()]


def round_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest E2M1 value (ties to even, saturating at ±6); same shape and dtype as ``x``.

    0.25→0, 0.75→1, 1.25→1, 1.75→2, 2.5→2, 3.5→4, 5→4, and the same with a minus sign.
    ±inf saturate to ±6; NaN raises ValueError.
    """
    return e2m1_values(e2m1_codes(x)).to(x.dtype)


def to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round to ``torch.float8_e4m3fn`` (nearest, ties to even, subnormals kept), saturating at ±448.

    torch 2.14's CPU cast already saturates, but that is not a documented guarantee of every backend
    (E4M3 "fn" has no inf, and an overflowing cast may give NaN), so we clamp first. NaN raises.
    """
    x = x.to(torch.float32)
    if bool(torch.isnan(x).any()):
        raise ValueError("to_e4m3: input has NaN")
    return _e4m3(x)


def _e4m3(x: torch.Tensor) -> torch.Tensor:
    """``to_e4m3`` of a float32 tensor, without the NaN check (no host sync): NaN stays NaN."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def _pad_to_block(x: torch.Tensor, dim: int) -> torch.Tensor:
    rem = x.shape[dim] % BLOCK
    if rem == 0:
        return x
    pad_shape = list(x.shape)
    pad_shape[dim] = BLOCK - rem
    return torch.cat([x, x.new_zeros(pad_shape)], dim=dim)


def _global_scale(amax: torch.Tensor) -> torch.Tensor:
    """S = 448·6 / amax as float32, capped at FLT_MAX (for subnormal amax), and 1 when amax is 0."""
    amax = amax.to(torch.float32)
    s = torch.full_like(amax, E4M3_MAX * E2M1_MAX) / amax  # made on amax's device: no host-to-device copy
    s = s.clamp(max=_FLT_MAX)
    return torch.where(amax == 0, torch.ones_like(s), s)


def _block_amax(x2: torch.Tensor, fmt: str) -> torch.Tensor:
    """Per-row block amax of a (rows, cols) tensor padded to multiples of 16, shape (rows, cols/16)."""
    rows, cols = x2.shape
    a = x2.abs()
    if fmt == "nvfp4":
        return a.view(rows, cols // BLOCK, BLOCK).amax(dim=-1)
    tiles = a.view(rows // BLOCK, BLOCK, cols // BLOCK, BLOCK).amax(dim=(1, 3))
    return tiles.repeat_interleave(BLOCK, dim=0)  # each tile's scale shared by its 16 rows


class _Blocks(NamedTuple):
    xs: torch.Tensor  # the padded input scaled into E2M1 range, shape (rows', blocks, 16)
    scales: torch.Tensor  # E4M3 block scales, shape (rows', blocks)
    S: torch.Tensor  # the FP32 global (encode) scale
    rows: int  # rows before padding
    padded_shape: torch.Size


def _scaled_blocks(x2: torch.Tensor, fmt: str) -> _Blocks:
    """Pad a non-empty (rows, cols) float32 tensor to 16-blocks (2-D: 16×16 tiles), compute S and the block scales,
    and scale every element into E2M1 range — the part shared by `nvfp4_encode` and the fused `quantize_dequantize`."""
    xp = _pad_to_block(x2, 1)
    if fmt == "nvfp4_2d":
        xp = _pad_to_block(xp, 0)
    S = _global_scale(x2.abs().amax())
    S_inv = 1.0 / S
    scales = _e4m3(_block_amax(xp, fmt) * (S * _INV_E2M1_MAX))
    sf = scales.to(torch.float32)
    enc = (1.0 / (sf * S_inv)).clamp(max=_FLT_MAX)
    enc = torch.where(sf == 0, torch.zeros_like(enc), enc)  # zero-scale blocks: every element → ±0
    xs = xp.view(xp.shape[0], -1, BLOCK) * enc.unsqueeze(-1)
    return _Blocks(xs, scales, S, x2.shape[0], xp.shape)


def nvfp4_encode(
    x: torch.Tensor, fmt: str = "nvfp4", check_finite: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Encode ``x`` to NVFP4: ``(codes, block_scales, global_scale)``.

    * ``codes``: uint8, shape of ``x``, one 4-bit E2M1 code (0..15) per element, unpacked;
    * ``block_scales``: float8_e4m3fn, shape ``(*x.shape[:-1], ceil(x.shape[-1] / 16))``, one per 1×16
      block. For ``fmt="nvfp4_2d"`` (2-D ``x`` only) every 16 rows of a tile share the tile's scale,
      stored repeated per row, so the same decoder serves both forms;
    * ``global_scale``: float32 0-dim tensor, the *encode* scale S = 448·6 / amax (1 if amax is 0).
      torchao's ``per_tensor_scale`` is the decode scale, 1/S.

    A 0-dim ``x`` is one element: one block scale, of shape ``(1,)``.
    Raises ValueError for non-finite input (unless ``check_finite=False``), an unknown fmt, or a non-2-D tensor with
    ``"nvfp4_2d"``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown NVFP4 format {fmt!r}; expected one of {FORMATS}")
    x32 = as_float32(x, "nvfp4_encode", check_finite)
    shape = x32.shape
    if fmt == "nvfp4_2d" and x32.dim() != 2:
        raise ValueError(f"fmt 'nvfp4_2d' needs a 2-D tensor (out × in), got shape {tuple(shape)}")
    cols = shape[-1] if x32.dim() > 0 else 1
    if x32.numel() == 0:
        n_blocks = -(-cols // BLOCK)
        return (
            x32.new_zeros(shape, dtype=torch.uint8),
            x32.new_zeros((*shape[:-1], n_blocks)).to(torch.float8_e4m3fn),
            x32.new_ones(()),
        )
    b = _scaled_blocks(x32.reshape(-1, cols), fmt)
    codes = _e2m1_codes(b.xs.clamp(-E2M1_MAX, E2M1_MAX)).view(b.padded_shape)
    scales, rows, S = b.scales, b.rows, b.S

    codes = codes[:rows, :cols].reshape(shape)
    scales = scales[:rows].reshape(*shape[:-1], -1)
    return codes, scales, S


def nvfp4_decode(
    codes: torch.Tensor,
    block_scales: torch.Tensor,
    global_scale: torch.Tensor | float,
    shape: tuple[int, ...] | torch.Size,
) -> torch.Tensor:
    """Decode NVFP4 to float32 of ``shape``: x̂ = q · (s_b · S⁻¹), with S⁻¹ = fp32(1 / global_scale).

    ``codes`` holds ``prod(shape)`` 4-bit codes in row-major order; ``block_scales`` one E4M3 scale
    per 1×16 block of the last dim (``prod(shape[:-1]) · ceil(shape[-1] / 16)`` values).
    """
    shape = tuple(shape)
    cols = shape[-1] if shape else 1
    n = codes.numel()
    rows = n // cols if cols else 0
    if rows * cols != n or n != int(torch.Size(shape).numel()):
        raise ValueError(f"{n} codes do not fill shape {shape}")
    nb = -(-cols // BLOCK)
    if block_scales.numel() != rows * nb:
        raise ValueError(f"expected {rows * nb} block scales for shape {shape}, got {block_scales.numel()}")
    S = torch.as_tensor(global_scale, dtype=torch.float32)
    dec_scale = block_scales.reshape(rows, nb).to(torch.float32) * (1.0 / S)
    q = _pad_to_block(e2m1_values(codes.reshape(rows, cols)), 1)
    out = q.view(rows, nb, BLOCK) * dec_scale.unsqueeze(-1)
    return out.view(rows, nb * BLOCK)[:, :cols].reshape(shape)


def quantize_dequantize(x: torch.Tensor, fmt: str = "nvfp4", check_finite: bool = True) -> torch.Tensor:
    """Fake-quantize ``x`` to a low-precision format and back; same shape and dtype out, computed in float32.

    ``fmt="nvfp4"``: NVFP4 with 1×16 blocks of consecutive elements along the last dim (any rank).
    ``fmt="nvfp4_2d"``: NVFP4 with 16×16 tiles of a 2-D tensor (a weight, out × in), one amax per tile.
    ``fmt="fp8"``: FP8 E4M3 with one per-tensor FP32 scale (amax / 448), round to nearest even,
    saturating (see ``solrl_core.models.quant.fp8``).
    NVFP4: a last dim (or row count, for 2-D) that is not a multiple of 16 is zero-padded to the next
    multiple of 16 and cropped back; zeros never change an amax. All-zero blocks give zeros.
    Non-finite input raises ValueError; ``check_finite=False`` skips that check (and its host sync), as a layer's
    forward does: a non-finite input then gives a NaN output. See the module docstrings for the float32 arithmetic
    order.
    """
    if fmt == "fp8":
        return fp8_quantize_dequantize(x, check_finite)
    if fmt not in FORMATS:
        raise ValueError(f"unknown quantization format {fmt!r}; expected one of {QDQ_FORMATS}")
    return _qdq_nvfp4(x, fmt, check_finite).to(x.dtype)


def _round_e2m1_float(y: torch.Tensor) -> torch.Tensor:
    """E2M1 rounding done in float arithmetic (the fast path of quantize_dequantize).

    Within each binade the E2M1 grid is uniform (step 0.5 below 2, 1 in [2, 4), 2 in [4, 6]), so rounding is
    ``round(|y| / step) * step`` with torch.round's ties-to-even — the same values as ``round_to_e2m1``
    (tests check equality on every element).
    """
    a = y.abs().clamp(max=E2M1_MAX)
    step = torch.where(a < 2.0, 0.5, torch.where(a < 4.0, 1.0, 2.0))
    return torch.copysign(torch.round(a / step) * step, y)


def _qdq_nvfp4(x: torch.Tensor, fmt: str, check_finite: bool) -> torch.Tensor:
    """encode + decode fused: identical float32 arithmetic, without materialising the 4-bit codes."""
    x32 = as_float32(x, "quantize_dequantize", check_finite)
    if fmt == "nvfp4_2d" and x32.dim() != 2:
        raise ValueError(f"fmt 'nvfp4_2d' needs a 2-D tensor (out × in), got shape {tuple(x32.shape)}")
    if x32.numel() == 0:
        return torch.empty_like(x32)
    shape = x32.shape
    cols = shape[-1] if x32.dim() > 0 else 1
    b = _scaled_blocks(x32.reshape(-1, cols), fmt)
    q = _round_e2m1_float(b.xs)
    out = (q * (b.scales.to(torch.float32) * (1.0 / b.S)).unsqueeze(-1)).view(b.padded_shape)
    return out[: b.rows, :cols].reshape(shape)
