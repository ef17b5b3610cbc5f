"""What the NVFP4 and FP8 emulations share: E4M3's largest magnitude and the check of their float inputs."""

from __future__ import annotations

import torch

E4M3_MAX = 448.0


def as_float32(x: torch.Tensor, what: str, check_finite: bool = True) -> torch.Tensor:
    """``x`` detached, in float32. Raises TypeError for a non-float input and, when ``check_finite``, ValueError for
    NaN/±inf (or values beyond float32 range).

    The finiteness check reads a flag back from the device (a host sync): it belongs where a user error must be caught
    once (quantizing a weight, a test), never in a layer's per-call activation path, which passes
    ``check_finite=False``; there a non-finite input makes the output non-finite (NaN) instead of raising.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"{what} needs a floating-point tensor, got {getattr(x, 'dtype', type(x))}")
    x32 = x.detach().to(torch.float32)
    if check_finite and not bool(torch.isfinite(x32).all()):
        raise ValueError(f"{what}: input has non-finite values (NaN or ±inf, or beyond float32 range)")
    return x32
