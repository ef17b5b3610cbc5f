"""FP8 E4M3 per-tensor emulation: a reference written from the format definition, hand-worked ties, and the
FP8 Linear layers (emulated and torch._scaled_mm)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from solrl_core.models.quant import quantize_dequantize
from solrl_core.models.quant.fp8 import fp8_decode, fp8_encode, fp8_quantize_dequantize, fp8_scale
from solrl_core.models.quant.layers import BF16Linear, FP8EmulatedLinear, ScaledMMFP8Linear

# ---------------------------------------------------------------- reference from the definition


def e4m3_magnitudes() -> torch.Tensor:
    """All finite non-negative E4M3 ("fn") values in code order, from the definition: 4 exponent bits with
    bias 7, 3 mantissa bits, exponent field 0 subnormal, the all-ones code (S.1111.111) NaN; no inf."""
    vals = []
    for e in range(16):
        for m in range(8):
            if e == 15 and m == 7:
                continue  # NaN
            vals.append(m / 8 * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return torch.tensor(vals, dtype=torch.float64)


GRID = e4m3_magnitudes()


def ref_round_e4m3(v: torch.Tensor) -> torch.Tensor:
    """Round float64 values to E4M3: nearest, ties to the even code, saturating at ±448."""
    a = v.abs().clamp(max=448.0)
    hi_idx = torch.searchsorted(GRID, a).clamp(max=len(GRID) - 1)  # first grid value >= a
    lo_idx = (hi_idx - 1).clamp(min=0)
    lo, hi = GRID[lo_idx], GRID[hi_idx]
    d_lo, d_hi = a - lo, hi - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi_idx % 2 == 0))
    mag = torch.where(pick_hi, hi, lo)
    return torch.copysign(mag, v)


def test_grid_matches_torch_float8():
    codes = torch.arange(0, 0x7F, dtype=torch.uint8)
    assert torch.equal(codes.view(torch.float8_e4m3fn).double(), GRID)
    assert GRID[-1] == 448.0 and GRID[1] == 2.0**-9


def _inputs():
    """~1.1M values: tensors at scales 1e-6 … 1e4, a heavy-tailed one (subnormal codes), zeros."""
    g = torch.Generator().manual_seed(11)
    for scale in (1e-6, 1e-4, 1e-2, 1.0, 1e2, 1e4):
        yield torch.randn(192, 1024, generator=g) * scale
    yield torch.randn(256, 512, generator=g) * torch.exp(3 * torch.randn(256, 512, generator=g))
    x = torch.randn(64, 64, generator=g)
    x[::3] = 0.0
    yield x


def test_codes_equal_reference_rounding_on_a_million_values():
    n = 0
    for x in _inputs():
        codes, S = fp8_encode(x)
        assert S.dtype == torch.float32 and S.dim() == 0
        assert S.item() == pytest.approx(448.0 / x.abs().max().item(), rel=1e-6)
        assert S == torch.tensor(448.0) / x.abs().max()  # rounded once, in float32
        scaled = (x * S).double()  # the float32 product, as the encoder forms it
        assert torch.equal(codes.double(), ref_round_e4m3(scaled))
        # decode: q · fp32(1/S), in float32
        assert torch.equal(fp8_decode(codes, S), codes.float() * (1.0 / S))
        n += x.numel()
    assert n >= 1_000_000


@pytest.mark.parametrize("k", [-20, -3, 0, 5, 12])
def test_end_to_end_against_float64_reference_with_exact_scale(k):
    # amax = 448 · 2^k makes S = 2^-k exact, so every product is exact in float32 and float64 alike.
    g = torch.Generator().manual_seed(k + 50)
    x = torch.randn(64, 96, generator=g) * torch.exp(2 * torch.randn(64, 1, generator=g))
    x = x / x.abs().max() * (448.0 * 2.0**k)
    S_ref = 448.0 / x.double().abs().max()
    ref = ref_round_e4m3(x.double() * S_ref) / S_ref
    assert torch.equal(fp8_quantize_dequantize(x).double(), ref)


def test_ties_round_to_even_and_saturation():
    # amax 448 -> S = 1: values land on the grid directly.
    x = torch.tensor([448.0, 17.0, 19.0, -17.0, 1.0625, 1.1875, 2.0**-10, 3 * 2.0**-10, 0.6 * 2.0**-10, 0.0, -0.0])
    q = fp8_quantize_dequantize(x)
    # 17 between 16 (m=0) and 18 (m=1) -> 16; 19 between 18 and 20 -> 20; 1.0625 between 1 and 1.125 -> 1;
    # 1.1875 between 1.125 (m=1) and 1.25 (m=2) -> 1.25; 2^-10 between 0 and 2^-9 -> 0;
    # 3·2^-10 between 2^-9 (m=1) and 2^-8 (m=2) -> 2^-8; below half the smallest step -> 0.
    expected = [448.0, 16.0, 20.0, -16.0, 1.0, 1.25, 0.0, 2.0**-8, 0.0, 0.0, 0.0]
    assert q.tolist() == expected
    codes, S = fp8_encode(torch.tensor([448.0, -448.0, 100.0]))  # 100: tie of 96 (m=4) and 104 (m=5)
    assert codes.float().tolist() == [448.0, -448.0, 96.0] and S.item() == 1.0
    # Saturation: the tensor's amax always lands on ±448 (never NaN, whatever the rounding of S).
    g = torch.Generator().manual_seed(2)
    for amax in torch.exp(20 * torch.rand(200, generator=g) - 10).tolist():
        x = torch.tensor([amax, -amax / 3, amax / 7])
        codes, _ = fp8_encode(x)
        assert codes.float()[0].item() == 448.0 and not torch.isnan(codes.float()).any()
    big = torch.tensor([1e30, -1e30, 1.0])
    assert fp8_quantize_dequantize(big).tolist() == pytest.approx([1e30, -1e30, 0.0], rel=1e-6)


def test_zero_tiny_and_non_finite():
    z = torch.zeros(3, 5)
    codes, S = fp8_encode(z)
    assert S.item() == 1.0 and torch.equal(fp8_quantize_dequantize(z), z)
    tiny = torch.tensor([1e-38, -5e-39])  # amax < 448 / FLT_MAX would overflow S: capped at FLT_MAX
    assert fp8_scale(torch.tensor(1e-38)).item() == torch.finfo(torch.float32).max
    assert torch.isfinite(fp8_quantize_dequantize(tiny)).all()
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            fp8_quantize_dequantize(torch.tensor([1.0, bad]))
    assert fp8_quantize_dequantize(torch.empty(0, 4)).shape == (0, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_public_entry_point_shape_dtype(dtype):
    x = torch.randn(2, 3, 40).to(dtype)
    out = quantize_dequantize(x, "fp8")
    assert out.shape == x.shape and out.dtype == dtype
    assert torch.equal(out, fp8_quantize_dequantize(x))
    rel = ((out.double() - x.double()).norm() / x.double().norm()).item()
    assert 0.0 < rel < 0.05  # E4M3: 3 mantissa bits, ~2-3% relative error on Gaussian data


def test_unknown_format_lists_fp8():
    with pytest.raises(ValueError, match="fp8"):
        quantize_dequantize(torch.ones(4), "fp4")


# ---------------------------------------------------------------- FP8 Linear layers


def _linear(in_f=64, out_f=48, bias=True, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(in_f, out_f, bias=bias)


def test_fp8_emulated_linear_is_qdq_then_linear():
    lin = _linear()
    layer = FP8EmulatedLinear(lin)
    x = torch.randn(2, 5, 64)
    expected = F.linear(fp8_quantize_dequantize(x), fp8_quantize_dequantize(lin.weight.detach()), lin.bias)
    assert torch.equal(layer(x), expected)
    assert not any(p.requires_grad for p in layer.parameters())
    assert 0.0 < layer.weight_rel_error < 0.05


def test_scaled_mm_linear_matches_emulation():
    """torch._scaled_mm (runs on CPU in torch 2.14): same codes as the emulation, output equal up to the order
    in which scales and accumulation are applied."""
    for bias in (True, False):
        lin = _linear(bias=bias, seed=3)
        real, emu = ScaledMMFP8Linear(lin), FP8EmulatedLinear(lin)
        codes, S = fp8_encode(lin.weight.detach())
        assert torch.equal(real.weight_fp8.view(torch.uint8), codes.view(torch.uint8))
        assert real.weight_scale_inv.item() == (1.0 / S).item()
        assert real.weight_rel_error == pytest.approx(emu.weight_rel_error, rel=1e-6)
        x = torch.randn(3, 7, 64, generator=torch.Generator().manual_seed(1))
        y_real, y_emu = real(x), emu(x)
        assert y_real.shape == (3, 7, 48) and y_real.dtype == x.dtype
        torch.testing.assert_close(y_real, y_emu, rtol=1e-5, atol=1e-6)


def test_bf16_linear_rounds_weights_inputs_and_outputs():
    lin = _linear()
    layer = BF16Linear(lin)
    assert layer.weight.dtype == torch.bfloat16 and layer.bias.dtype == torch.bfloat16
    x = torch.randn(4, 64)
    bf = torch.bfloat16
    expected = F.linear(x.to(bf).float(), lin.weight.detach().to(bf).float(), lin.bias.detach().to(bf).float())
    assert torch.equal(layer(x), expected.to(bf).float())
    assert layer(x).dtype == torch.float32
    assert 0.0 < layer.weight_rel_error < 0.01


# ---- the activation paths: the same codes, one chunk's float32 temporary -------------------------------------------
def _activations(dtype):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(5, 9, 40, generator=g) * 3
    x[0, 0, :4] = torch.tensor([0.0, -0.0, 1e-30, -6e4])  # zeros, a tiny value, the amax (negative, fp16's range)
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("chunk", [7, 40, 1 << 22])  # under a row, rows and a ragged last chunk, the whole tensor
def test_the_activation_paths_equal_the_whole_tensor_float32_path_bit_for_bit(dtype, chunk, monkeypatch):
    import solrl_core.models.quant.fp8 as fp8

    from solrl_core.models.quant.fp8 import fp8_encode_activation, fp8_qdq_activation

    monkeypatch.setattr(fp8, "CHUNK_ELEMENTS", chunk)
    x = _activations(dtype)
    codes, S = fp8_encode_activation(x)
    ref_codes, ref_S = fp8_encode(x, check_finite=False)
    assert codes.shape == x.shape and torch.equal(codes.view(torch.uint8), ref_codes.view(torch.uint8))
    assert torch.equal(S, ref_S)
    out = fp8_qdq_activation(x)
    assert out.dtype == dtype and torch.equal(out, fp8_quantize_dequantize(x, check_finite=False))
    x[1, 2, 3] = float("nan")  # no check, no sync: a NaN input gives NaN out, as the whole-tensor path
    assert torch.isnan(fp8_qdq_activation(x)).all()
    empty = torch.empty(0, 8, dtype=dtype)
    assert fp8_qdq_activation(empty).shape == (0, 8) and fp8_encode_activation(empty)[1].item() == 1.0


def _peak_temporary_bytes(fn, x) -> int:
    """The most bytes of tensors made inside `fn(x)` alive at once (planner.live_bytes: a dispatch mode counts every
    new storage and its release)."""
    from solrl_core.planner.live_bytes import peak_bytes

    return peak_bytes(fn, x)


def test_the_activation_paths_hold_one_chunk_of_float32_beside_their_output(monkeypatch):
    """An explore-sized bf16 activation: the whole-tensor path peaks at several float32 copies of it; the activation
    path at its output (codes: 1 byte an element; qdq: the input's dtype) plus one chunk."""
    import solrl_core.models.quant.fp8 as fp8

    from solrl_core.models.quant.fp8 import fp8_encode_activation, fp8_qdq_activation

    monkeypatch.setattr(fp8, "CHUNK_ELEMENTS", 1 << 14)
    x = torch.randn(64, 1024, dtype=torch.bfloat16)  # 2^16 elements, 4 chunks
    n, chunk = x.numel(), 4 * (1 << 14)
    whole = _peak_temporary_bytes(lambda t: fp8_quantize_dequantize(t, check_finite=False), x)
    assert whole >= 3 * 4 * n  # float32 copies of the whole input
    lean = _peak_temporary_bytes(fp8_qdq_activation, x)
    assert lean <= 2 * n + chunk + chunk // 4 + 64  # the bf16 output, one float32 chunk, its E4M3 codes, scalars
    assert _peak_temporary_bytes(lambda t: fp8_encode_activation(t)[0], x) <= n + chunk + 64
