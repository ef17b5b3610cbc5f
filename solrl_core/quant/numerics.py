"""What the NVFP4 and FP8 emulations share: E4M3's largest magnitude and the check of their float inputs."""

from __future__ import annotations

import torch

E4M3_MAX = 448.0


def as_float32(x: torch.Tensor, what: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"{what} needs a floating-point tensor, got {getattr(x, 'dtype', type(x))}")
    x32 = x.detach().to(torch.float32)
    if not bool(torch.isfinite(x32).all()):
        raise ValueError(f"{what}: input has non-finite values (NaN or ±inf, or beyond float32 range)")
    return x32
