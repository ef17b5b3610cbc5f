"""Initial noise from integer seeds: a seed gives the same noise in any run, process or batch."""

from __future__ import annotations

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
