"""DDPO's JPEG rewards: the size of the image saved as JPEG at quality 95, in kB (negated for compressibility)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from PIL import Image

JPEG_QUALITY = 95


def jpeg_size_kb(images: np.ndarray) -> np.ndarray:
    """JPEG size in kB (1000 bytes) of each uint8 image (B, H, W, 3)."""
    sizes = []
    for image in np.asarray(images, dtype=np.uint8):
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=JPEG_QUALITY)
        sizes.append(buffer.tell() / 1000.0)
    return np.array(sizes, dtype=np.float64)


def jpeg_compressibility(images: np.ndarray, prompts: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Negative JPEG size in kB: smaller files score higher. Prompts are ignored."""
    size = jpeg_size_kb(images)
    return {"reward": -size, "jpeg_kb": size}


def jpeg_incompressibility(images: np.ndarray, prompts: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """JPEG size in kB: larger files score higher. Prompts are ignored."""
    size = jpeg_size_kb(images)
    return {"reward": size, "jpeg_kb": size}
