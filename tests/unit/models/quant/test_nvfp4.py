"""NVFP4 emulation: hand-worked cases, a from-the-definition reference, and torchao's NVFP4Tensor."""

import itertools

import pytest
import torch

from solrl_core.models.quant.nvfp4 import (
    E2M1_VALUES,
    e2m1_codes,
    nvfp4_decode,
    nvfp4_encode,
    quantize_dequantize,
    round_to_e2m1,
    to_e4m3,
)

# ---------------------------------------------------------------- E2M1 element rounding

RNE_TIES = [(0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0), (5.0, 4.0)]


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("value,expected", RNE_TIES)
def test_e2m1_ties_round_to_even(value, expected, sign):
    out = round_to_e2m1(torch.tensor([sign * value]))
    assert out.item() == sign * expected


def test_e2m1_grid_values_are_fixed_points_with_standard_codes():
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    assert torch.equal(e2m1_codes(grid), torch.arange(8, dtype=torch.uint8))
    assert torch.equal(e2m1_codes(-grid), torch.arange(8, 16, dtype=torch.uint8))
    assert torch.equal(round_to_e2m1(grid), grid)
    assert torch.equal(E2M1_VALUES[8:], -grid)


def test_e2m1_codes_match_torchao_bit_layout():
    from torchao.prototype.mx_formats.kernels import f32_to_f4_unpacked

    x = torch.linspace(-7.0, 7.0, 2801)  # step 0.005: hits every midpoint and both signs
    x = torch.cat([x, torch.tensor([-0.0, 0.0, -0.1, 1e30, -1e30])])
    assert torch.equal(e2m1_codes(x), f32_to_f4_unpacked(x.clamp(-6, 6)))


def test_e2m1_below_smallest_step_flushes_to_zero():
    x = torch.tensor([0.0, 1e-30, 0.1, 0.2499, -0.2499, -1e-30])
    out = round_to_e2m1(x)
    assert torch.equal(out.abs(), torch.zeros(6))
    assert round_to_e2m1(torch.tensor([0.2501])).item() == 0.5


def test_e2m1_saturates_at_6():
    x = torch.tensor([6.0, 6.5, 7.0, 100.0, 1e30, float("inf"), -6.0, -9.0, float("-inf")])
    expected = torch.tensor([6.0] * 6 + [-6.0] * 3)
    assert torch.equal(round_to_e2m1(x), expected)


def test_round_to_e2m1_keeps_dtype():
    x = torch.tensor([0.7, -2.6], dtype=torch.bfloat16)
    out = round_to_e2m1(x)
    assert out.dtype == torch.bfloat16 and out.tolist() == [0.5, -3.0]


# ---------------------------------------------------------------- E4M3 block scales


def test_to_e4m3_rounds_to_nearest_even_with_subnormals():
    x = torch.tensor([17.0, 19.0, 18.0, 2.0**-9, 2.0**-10, 1.5 * 2.0**-10, 3 * 2.0**-10, 0.0])
    expected = [16.0, 20.0, 18.0, 2.0**-9, 0.0, 2.0**-9, 2 * 2.0**-9, 0.0]
    out = to_e4m3(x)
    assert out.dtype == torch.float8_e4m3fn
    assert out.float().tolist() == expected


def test_block_scale_saturates_at_448():
    # 465 and 480 would round to 480, which E4M3 "fn" cannot hold (it would be NaN without saturation).
    x = torch.tensor([448.0, 464.0, 465.0, 480.0, 1e4, float("inf"), -1e4])
    assert to_e4m3(x).float().tolist() == [448.0, 448.0, 448.0, 448.0, 448.0, 448.0, -448.0]
    # The block holding the tensor's amax gets the largest scale, 448, whatever the magnitude.
    for amax in (3.3e-5, 0.77, 12.0, 9.1e3):
        x = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
        x = x / x.abs().max() * amax
        _, scales, _ = nvfp4_encode(x)
        assert scales.float().max().item() == 448.0


def test_to_e4m3_rejects_nan():
    with pytest.raises(ValueError):
        to_e4m3(torch.tensor([1.0, float("nan")]))


# ---------------------------------------------------------------- whole-format hand-worked cases


def test_hand_computed_blocks_against_the_formula():
    # Two blocks; tensor amax 12 -> S = 2688 / 12 = 224 exactly.
    b0 = [0.0, 0.1, -0.3, 0.5, 0.74, 1.0, -1.3, 2.0, 2.6, 3.0, -3.6, 4.1, 5.0, 5.5, -7.0, 12.0]
    b1 = [1.0, 0.5, 0.1, -0.2, 0.25, 0.75, -0.9] + [0.0] * 9
    codes, scales, S = nvfp4_encode(torch.tensor([b0 + b1]))
    assert S.item() == 224.0
    # Block 0: amax 12 -> s_b = e4m3(12 / 6 * 224 = 448) = 448; x * S / s_b = x / 2.
    # x/2 = 0, .05, -.15, .25(tie->0), .37, .5, -.65, 1, 1.3, 1.5, -1.8, 2.05, 2.5(tie->2), 2.75, -3.5(tie->4), 6
    q0 = [0, 0, -0.0, 0, 0.5, 0.5, -0.5, 1, 1.5, 1.5, -2, 2, 2, 3, -4, 6]
    # Block 1: amax 1 -> (1 / 6) * 224 = 37.33 -> E4M3 neighbours 36 and 40 (step 4) -> s_b = 36.
    # x * 224 / 36 = x * 6.222: 6.22, 3.11, .622, -1.244, 1.556, 4.667, -5.6
    q1 = [6, 3, 0.5, -1, 1.5, 4, -6] + [0] * 9
    assert scales.float().tolist() == [[448.0, 36.0]]
    assert (scales.float()[0, 0] * (1 / S)).item() == 2.0  # the scale products here are exact
    assert E2M1_VALUES[codes.long()].tolist() == [q0 + q1]
    decoded = nvfp4_decode(codes, scales, S, (1, 32))
    expected = torch.tensor([[q * 448 / 224 for q in q0] + [q * 36 / 224 for q in q1]])
    torch.testing.assert_close(decoded, expected, rtol=2e-7, atol=0)
    assert decoded[0, 16].item() == pytest.approx(6 * 36 / 224, rel=1e-7)  # 0.9642857...


def test_single_huge_value_flushes_its_block():
    x = torch.tensor([[1000.0] + [1.0, -2.0, 0.5, 3.0] * 3 + [0.2, -0.1, 0.0]])
    out = quantize_dequantize(x)
    # s_b = 448, so the step next to zero is 0.5 * 448 / S = 1000 / 12 = 83.3: everything else is 0.
    assert out[0, 0].item() == pytest.approx(1000.0, rel=1e-6)
    assert torch.equal(out[0, 1:].abs(), torch.zeros(15))


def test_all_zero_tensor_and_blocks_give_zeros():
    z = torch.zeros(3, 40)
    codes, scales, S = nvfp4_encode(z)
    assert S.item() == 1.0 and torch.equal(codes, torch.zeros_like(codes))
    assert torch.equal(scales.float(), torch.zeros(3, 3))
    assert torch.equal(quantize_dequantize(z), z)
    assert torch.equal(quantize_dequantize(z, "nvfp4_2d"), z)
    x = torch.randn(2, 48)
    x[1, 16:32] = 0.0
    out = quantize_dequantize(x)
    assert torch.isfinite(out).all() and torch.equal(out[1, 16:32], torch.zeros(16))


def test_non_finite_input_rejected():
    for bad in (float("nan"), float("inf"), float("-inf")):
        x = torch.ones(2, 16)
        x[1, 3] = bad
        for fmt in ("nvfp4", "nvfp4_2d"):
            with pytest.raises(ValueError):
                quantize_dequantize(x, fmt)
        with pytest.raises(ValueError):
            nvfp4_encode(x)
    with pytest.raises(ValueError):  # finite in float64, not in float32
        quantize_dequantize(torch.tensor([1e300, 1.0], dtype=torch.float64))


def test_bad_format_and_rank_rejected():
    with pytest.raises(ValueError):
        quantize_dequantize(torch.ones(16), "nvfp8")
    with pytest.raises(ValueError):
        quantize_dequantize(torch.ones(2, 16, 16), "nvfp4_2d")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_shape_and_dtype_preserved(dtype):
    x = torch.randn(2, 3, 40).to(dtype)
    out = quantize_dequantize(x)
    assert out.shape == x.shape and out.dtype == dtype
    w = torch.randn(24, 40).to(dtype)
    out2 = quantize_dequantize(w, "nvfp4_2d")
    assert out2.shape == w.shape and out2.dtype == dtype
    assert torch.equal(quantize_dequantize(w.t(), "nvfp4_2d"), quantize_dequantize(w.t().contiguous(), "nvfp4_2d"))


def test_encode_decode_round_trip_equals_qdq():
    x = torch.randn(5, 7, 48)
    codes, scales, S = nvfp4_encode(x)
    assert codes.shape == x.shape and codes.dtype == torch.uint8 and int(codes.max()) <= 15
    assert scales.shape == (5, 7, 3) and scales.dtype == torch.float8_e4m3fn
    assert S.dtype == torch.float32 and S.dim() == 0
    assert torch.equal(nvfp4_decode(codes, scales, S, x.shape), quantize_dequantize(x))


def test_zero_dim_and_empty_tensors():
    # A 0-dim tensor is one element (one block): the same as the 1-element vector.
    for value in (3.3, -0.07, 0.0):
        x = torch.tensor(value)
        out = quantize_dequantize(x)
        assert out.shape == () and torch.equal(out, quantize_dequantize(x.reshape(1))[0])
        codes, scales, S = nvfp4_encode(x)
        assert codes.shape == () and scales.shape == (1,)
        assert torch.equal(nvfp4_decode(codes, scales, S, ()), out)
    empty = torch.empty(0, 32, dtype=torch.bfloat16)
    assert quantize_dequantize(empty).shape == (0, 32) and quantize_dequantize(empty).dtype == torch.bfloat16


# ---------------------------------------------------------------- padding rule


@pytest.mark.parametrize("cols", [1, 7, 20, 33])
def test_width_not_multiple_of_16_is_zero_padded_and_cropped(cols):
    x = torch.randn(6, cols, generator=torch.Generator().manual_seed(cols))
    padded_cols = -(-cols // 16) * 16
    padded = torch.nn.functional.pad(x, (0, padded_cols - cols))
    assert torch.equal(quantize_dequantize(x), quantize_dequantize(padded)[:, :cols])
    rows_padded = torch.nn.functional.pad(x, (0, padded_cols - cols, 0, 10))  # 6 -> 16 rows
    assert torch.equal(quantize_dequantize(x, "nvfp4_2d"), quantize_dequantize(rows_padded, "nvfp4_2d")[:6, :cols])
    codes, scales, _ = nvfp4_encode(x)
    assert codes.shape == x.shape and scales.shape == (6, padded_cols // 16)


# ---------------------------------------------------------------- reference from the definition


def _e4m3_grid():
    """All non-negative finite E4M3 values with their codes (0x7F is NaN)."""
    codes = torch.arange(0, 0x7F, dtype=torch.uint8)
    return codes.view(torch.float8_e4m3fn).double().tolist()


_E4M3 = _e4m3_grid()
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _nearest_even(v: float, grid: list[float]) -> float:
    """Nearest grid magnitude to |v| (grid index even on a tie), saturating; sign of v kept."""
    a = min(abs(v), grid[-1])
    best = min(range(len(grid)), key=lambda i: (abs(grid[i] - a), i % 2))
    return grid[best] if v >= 0 else -grid[best]


def _reference_qdq(x: torch.Tensor, tile_rows: int) -> torch.Tensor:
    """NVFP4 from docs/method.md, element by element in float64: tiles of tile_rows × 16, zero padding."""
    rows, cols = x.shape
    xd = x.double()
    amax = xd.abs().max().item()
    S = 448 * 6 / amax if amax > 0 else 1.0
    out = torch.zeros_like(xd)
    for r0, c0 in itertools.product(range(0, rows, tile_rows), range(0, cols, 16)):
        tile = xd[r0 : r0 + tile_rows, c0 : c0 + 16]
        s_b = _nearest_even(tile.abs().max().item() / 6 * S, _E4M3)
        for i, j in itertools.product(range(tile.shape[0]), range(tile.shape[1])):
            q = _nearest_even(tile[i, j].item() * S / s_b, _E2M1) if s_b > 0 else 0.0
            out[r0 + i, c0 + j] = q * s_b / S
    return out


@pytest.mark.parametrize("shape", [(32, 48), (40, 50), (17, 9)])
def test_2d_tiles_against_reference(shape):
    g = torch.Generator().manual_seed(sum(shape))
    w = torch.randn(shape, generator=g) * torch.exp(2 * torch.randn(shape[0], 1, generator=g))
    ref = _reference_qdq(w, tile_rows=16)
    # The reference works in float64, we in float32 (order of TE's kernels): decoded values agree to
    # float32 rounding. A code could in principle differ on an exact near-tie; none occurs here.
    torch.testing.assert_close(quantize_dequantize(w, "nvfp4_2d").double(), ref, rtol=3e-7, atol=0)
    # 2-D really shares one scale per 16×16 tile: the 1×16 form differs on this data.
    assert not torch.equal(quantize_dequantize(w, "nvfp4_2d"), quantize_dequantize(w, "nvfp4"))


def test_1x16_blocks_against_reference():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(12, 40, generator=g) * torch.exp(2 * torch.randn(12, 1, generator=g))
    torch.testing.assert_close(quantize_dequantize(x).double(), _reference_qdq(x, tile_rows=1), rtol=3e-7, atol=0)


# ---------------------------------------------------------------- torchao's NVFP4Tensor


def _torchao_encode(x: torch.Tensor, per_tensor_scale: torch.Tensor):
    from torchao.prototype.mx_formats.kernels import unpack_uint4
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor

    t = NVFP4Tensor.to_nvfp4(x, per_tensor_scale=per_tensor_scale)
    codes = unpack_uint4(t.qdata.contiguous().view(torch.uint8)).view(x.shape)
    return codes, t.scale.view(x.shape[0], -1), t.dequantize(torch.float32)


def _torchao_inputs():
    """6 float32 tensors (~1.2M values) across 1e-6 … 1e4, rows of varying scale, and one bf16 tensor."""
    g = torch.Generator().manual_seed(0)
    for scale in (1e-6, 1e-4, 1e-2, 1.0, 1e2, 1e4):
        yield torch.randn(256, 768, generator=g) * scale * torch.exp(torch.randn(256, 1, generator=g))
    yield (torch.randn(64, 256, generator=g) * 3).to(torch.bfloat16)


def test_codes_scales_and_values_equal_torchao():
    """torchao's per_tensor_scale is the *decode* global scale: per_tensor_scale = 1 / S.

    Given per_tensor_scale = fp32(1 / S), torchao reproduces our codes and E4M3 block scales on every
    element, and — since both decode as q · (per_tensor_scale · s_b) — our decoded floats bit for bit.
    torchao orders the encode arithmetic differently ((amax_b/6) / p and x · ((1/p) / s_b) against
    TE's amax_b · (S · 1/6) and x · 1/(s_b · S⁻¹)); that moves ~1/3 of the scaled values by an ulp,
    which could flip a code only for a value within an ulp of an E2M1 midpoint (none in this data).
    With torchao's own per_tensor_amax_to_scale(amax) = amax / (448 · 6) — the same number as 1/S
    up to rounding — codes and scales agree and decoded values within float32 rounding.
    """
    from torchao.prototype.mx_formats.nvfp4_tensor import per_tensor_amax_to_scale

    n = 0
    for x in _torchao_inputs():
        codes, scales, S = nvfp4_encode(x)
        ours = nvfp4_decode(codes, scales, S, x.shape)
        ao_codes, ao_scales, ao_dec = _torchao_encode(x, 1.0 / S)
        assert torch.equal(codes, ao_codes)
        assert torch.equal(scales.view(torch.uint8), ao_scales.view(torch.uint8))
        assert torch.equal(ours.view(torch.int32), ao_dec.view(torch.int32))

        ao_codes2, ao_scales2, ao_dec2 = _torchao_encode(x, per_tensor_amax_to_scale(x.abs().max()))
        assert torch.equal(codes, ao_codes2)
        assert torch.equal(scales.view(torch.uint8), ao_scales2.view(torch.uint8))
        torch.testing.assert_close(ours, ao_dec2, rtol=2.5e-7, atol=0)
        n += x.numel()
    assert n >= 1_000_000


def test_torchao_divergence_on_tiny_blocks_is_documented():
    """torchao clamps every block scale up to E4M3's smallest normal, 2⁻⁶; we (like TE and the format)
    keep subnormal scales (multiples of 2⁻⁹) and a zero scale for all-zero blocks. The two differ only
    on blocks whose amax is below ~3.5e-5 of the tensor's amax — never in the random data above."""
    a = 3 * 2.0**-9 * 6 / 2688  # amax_b · S / 6 = 3 · 2⁻⁹ exactly: a subnormal E4M3 scale
    x = torch.zeros(1, 48)
    x[0, 0] = 1.0
    x[0, 16:32] = torch.linspace(-a, a, 16)
    codes, scales, S = nvfp4_encode(x)
    ao_codes, ao_scales, ao_dec = _torchao_encode(x, 1.0 / S)
    assert scales.float().tolist() == [[448.0, 3 * 2.0**-9, 0.0]]
    assert ao_scales.float().tolist() == [[448.0, 2.0**-6, 2.0**-6]]
    ours = nvfp4_decode(codes, scales, S, x.shape)
    # Different numerics on that block (here ours is a little closer: torchao's step is 8/3 coarser).
    assert not torch.equal(ours[0, 16:32], ao_dec[0, 16:32])
    assert (ours - x)[0, 16:32].norm() < (ao_dec - x)[0, 16:32].norm()
    assert torch.equal(ours[0, 32:], torch.zeros(16)) and torch.equal(ao_dec[0, 32:], torch.zeros(16))
