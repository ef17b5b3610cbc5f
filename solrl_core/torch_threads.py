"""torch's intra-op CPU threads, set for a stretch of work and restored after it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


def set_threads(count: int) -> int:
    """Set the calling thread's torch intra-op threads (OpenMP and MKL keep them per thread; torch's global default
    moves too, for threads that start later); return the previous count."""
    import torch

    before = torch.get_num_threads()
    if before != count:  # setting them also empties oneDNN's cache of compiled kernels: only when they change
        torch.set_num_threads(count)
    return before


@contextlib.contextmanager
def intra_op_threads(count: int | None) -> Iterator[None]:
    """Run the block with `count` intra-op threads (None: as they are), then restore the calling thread's count."""
    if count is None:
        yield
        return
    before = set_threads(count)
    try:
        yield
    finally:
        set_threads(before)
