"""Which frames of a video stand for it where one look or one score cannot take every frame: the first, the last,
and evenly spaced ones between (a still's frame strip, an image reward scoring a video)."""

from __future__ import annotations

import numpy as np


def evenly_spaced(count: int, n: int | None) -> np.ndarray:
    """Indices of `n` of `count` frames, the first and the last among them, evenly spaced, in order (every frame when
    `n` is None or at least `count`)."""
    if n is None or n >= count:
        return np.arange(count)
    return np.unique(np.linspace(0, count - 1, max(n, 1)).round().astype(int))
