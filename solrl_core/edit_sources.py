"""The source images of edit prompts (a JSONL prompt line's "images", solrl_core/prompts.py): what identifies them and
how a pool stores them.

A source is named by its path, but identified by its bytes: `file_digest` (sha256, remembered per path, size and
modification time), so a moved file keeps its cached encoding and an overwritten one does not. A pool keeps, beside its
candidates, each of its prompts' sources at the generated size (`source_array`), so rewards, grids and a reader of the
pool see the source without the files.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from solrl_core.errors import SolrlError

Sources = tuple[str, ...]  # one prompt's source image paths (absolute)
SOURCES_ATTR = "sources"  # a pool's attribute: per pool prompt, its source paths
SOURCE_ARRAY = "source_image"  # a pool's array: (prompts, sources per prompt, H, W, 3) uint8 at the generated size


def file_digest(path: str) -> str:
    """The sha256 of the file's bytes (hex)."""
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise SolrlError(f"source image {path} cannot be read ({exc.strerror}); it was there when the prompts were "
                         "loaded: put it back") from None
    return _digest(path, stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=4096)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def load_images(paths: Sequence[str]) -> list:
    """The source images as RGB PIL images."""
    from PIL import Image

    images = []
    for path in paths:
        with Image.open(path) as opened:
            images.append(opened.convert("RGB"))
    return images


def source_array(sources: Sequence[Sources], height: int, width: int) -> np.ndarray:
    """Every prompt's sources resized (PIL Lanczos) to the generated size: (prompts, most sources, H, W, 3) uint8; a
    prompt with fewer sources than the most has black images after its own."""
    from PIL import Image

    most = max(len(s) for s in sources)
    out = np.zeros((len(sources), most, height, width, 3), dtype=np.uint8)
    for p, paths in enumerate(sources):
        for s, image in enumerate(load_images(paths)):
            out[p, s] = np.asarray(image.resize((width, height), Image.LANCZOS))
    return out


def pool_sources(attrs) -> list[Sources] | None:
    """The source images of a pool's prompts (its `sources` attribute), or None for a text-to-image pool."""
    found = attrs.get(SOURCES_ATTR)
    return None if found is None else [tuple(s) for s in found]
