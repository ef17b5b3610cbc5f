"""Noise from integer seeds: a seed gives the same noise in any run, process or batch; and any rows of one large
draw, drawn alone (`randn_rows`: each update rank draws only its share of the training noise)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def noise_from_seed(seed: int, shape: Sequence[int]) -> torch.Tensor:
    """Standard-normal noise of `shape` (one sample, no batch dim) drawn from a CPU generator seeded with `seed`."""
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    return torch.randn(tuple(shape), generator=generator, dtype=torch.float32)


def noise_batch(seeds: Sequence[int], shape: Sequence[int]) -> torch.Tensor:
    """Stack the per-seed noise of each seed: the result does not depend on batch composition."""
    return torch.stack([noise_from_seed(s, shape) for s in seeds])


def derived_generator(*keys: int) -> torch.Generator:
    """A CPU generator whose seed is derived from integer keys (run seed, iteration, purpose...)."""
    seed = 0
    for key in keys:
        seed = (seed * 1_000_003 + int(key) + 0x9E3779B9) % (2**63 - 1)
    return torch.Generator(device="cpu").manual_seed(seed)


# torch's CPU normal_ on a contiguous float32 tensor of n >= 16 elements first fills it with n uniforms, one 32-bit
# mt19937 output each, in order; then turns each block of 16 (elements 16j..16j+15) into 16 normals by Box-Muller,
# using only that block's uniforms; when n is not a multiple of 16 it draws 16 more uniforms and makes the last 16
# elements again from them (aten/src/ATen/native/cpu/DistributionTemplates.h, `normal_fill`). So any run of whole
# blocks of one draw can be drawn alone: skip the uniforms before it, then randn over those blocks.
_NORMAL_BLOCK = 16
DISCARD_CHUNK = 1 << 20  # uniforms thrown away per call while skipping ahead (a 4 MiB buffer)


def randn_rows(generator: torch.Generator, n_rows: int, row_shape: Sequence[int], start: int, stop: int,
               discard_chunk: int = DISCARD_CHUNK) -> torch.Tensor:
    """Rows [start, stop) of `torch.randn((n_rows, *row_shape), generator=generator)`, bit for bit, allocating only
    those rows (plus at most two blocks of 16 values and a `discard_chunk` buffer).

    The generator must be where the whole draw would start (a CPU generator); afterwards it is somewhere else. The
    uniforms before the rows are drawn and thrown away in chunks: time grows with `start`, memory does not."""
    row_shape = tuple(row_shape)
    row = math.prod(row_shape)
    total = n_rows * row
    if total < _NORMAL_BLOCK:  # torch draws these one value at a time, from another stream; they are tiny anyway
        return torch.randn((n_rows, *row_shape), generator=generator, dtype=torch.float32)[start:stop]
    lo, hi = start * row, stop * row
    out = torch.empty(hi - lo, dtype=torch.float32)
    # elements [0, body) come from whole blocks in order; [total - 16, total) from the 16 uniforms after the total
    body = total if total % _NORMAL_BLOCK == 0 else total - _NORMAL_BLOCK
    drawn = 0  # uniforms taken from the generator so far
    if lo < min(hi, body):
        first = lo - lo % _NORMAL_BLOCK
        end = min(hi, body)
        last = -(-end // _NORMAL_BLOCK) * _NORMAL_BLOCK
        _discard_uniforms(generator, first, discard_chunk)
        out[: end - lo] = torch.randn(last - first, generator=generator, dtype=torch.float32)[lo - first : end - first]
        drawn = last
    if hi > body:
        _discard_uniforms(generator, total - drawn, discard_chunk)
        tail = torch.randn(_NORMAL_BLOCK, generator=generator, dtype=torch.float32)
        begin = max(lo, body)
        out[begin - lo :] = tail[begin - (total - _NORMAL_BLOCK) : hi - (total - _NORMAL_BLOCK)]
    return out.view(stop - start, *row_shape)


def _discard_uniforms(generator: torch.Generator, count: int, chunk: int) -> None:
    """Advance `generator` by `count` 32-bit outputs: the float32 uniforms randn would have drawn."""
    buffer = torch.empty(min(count, chunk), dtype=torch.float32)
    while count > 0:
        take = min(count, chunk)
        buffer[:take].uniform_(generator=generator)
        count -= take
