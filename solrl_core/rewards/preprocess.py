"""Batched image preprocessing of the rewards that take tensors: uint8 (B, H, W, 3) in, normalised float (B, 3, S, S)
out, with torchvision's functional transforms on float tensors in [0, 1] (one implementation for CLIPScore, HPSv2
and the tensor half of ImageReward)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np


def resize_shortest_pil(image: np.ndarray, size: int) -> np.ndarray:
    """torchvision's Resize(size) on a PIL image, which transformers' CLIP image processor and ImageReward's transform
    both begin with: the shortest edge bicubically to `size`, the other to int(size * long / short); unchanged when it
    already is (Pillow returns a copy), so resizing twice gives the pixels of resizing once."""
    from PIL import Image

    h, w = image.shape[:2]
    new = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
    if new == (w, h):
        return image
    return np.asarray(Image.fromarray(image).resize(new, Image.Resampling.BICUBIC))


def unit_tensor(images: np.ndarray):
    """uint8 images (B, H, W, 3) as a float32 tensor (B, 3, H, W) in [0, 1]."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float() / 255.0


def normalised_pixels(
    images: np.ndarray,
    size: int | Sequence[int],
    fit: Literal["shortest", "longest"],
    interpolation: Literal["bilinear", "bicubic"],
    mean: Sequence[float],
    std: Sequence[float],
    crop: Sequence[int] | None = None,
):
    """Resize, crop or pad, and normalise a batch of uint8 images; returns a float32 tensor (B, 3, H', W').

    fit="shortest": resize the shortest edge to `size` (a pair: to exactly (height, width)), then centre-crop to `crop`
                    (height, width) when given: the CLIP image transform.
    fit="longest":  resize the longest edge to `size` (skipped when it already is) and pad the short side with zeros,
                    centred, to a `size` square: HPSv2's validation transform.
    Resizing is antialiased; mean/std normalise each channel.
    """
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as F

    mode = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC}[interpolation]
    x = unit_tensor(images)
    if fit == "shortest":
        x = F.resize(x, size if isinstance(size, int) else list(size), interpolation=mode, antialias=True)
        if crop is not None:
            x = F.center_crop(x, list(crop))
    else:
        height, width = x.shape[-2:]
        scale = int(size) / float(max(height, width))
        if scale != 1.0:
            new = [round(height * scale), round(width * scale)]
            x = F.resize(x, new, interpolation=mode, antialias=True)
            pad_h, pad_w = int(size) - new[0], int(size) - new[1]
            x = F.pad(x, [pad_w // 2, pad_h // 2, pad_w - pad_w // 2, pad_h - pad_h // 2], fill=0)
    return F.normalize(x, list(mean), list(std))
