"""What a reward server and its clients send each other (solrl_core/rewards/serving.py, remote.py): no pickle.

A request to score is one safetensors file: the uint8 images (B, H, W, 3) or videos (B, frames, H, W, 3) as the tensor
"images", the prompts as a JSON list in its metadata under "prompts", and for a reward that scores edits each image's
prompt's source images (B, sources, H, W, 3) uint8 as the tensor "sources". The answer is JSON: {"scores": [float, ...],
"fingerprint": str}; Python's JSON writes a float64 as its shortest repr and reads it back to the same bits, so served
scores equal in-process scores exactly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from solrl_core.errors import SolrlError

IMAGES = "images"
PROMPTS = "prompts"
SOURCES = "sources"
MEDIA_TYPE = "application/vnd.safetensors"
TOKEN_VARIABLE = "SOLRL_REWARD_TOKEN"  # the bearer token a server beyond loopback requires, and its clients send


def encode_request(images: np.ndarray, prompts: Sequence[str], sources: np.ndarray | None = None) -> bytes:
    from safetensors.numpy import save

    tensors = {IMAGES: np.ascontiguousarray(images, dtype=np.uint8)}
    if sources is not None:
        tensors[SOURCES] = np.ascontiguousarray(sources, dtype=np.uint8)
    return save(tensors, metadata={PROMPTS: json.dumps([str(p) for p in prompts])})


def decode_request(body: bytes) -> tuple[np.ndarray, list[str], np.ndarray | None]:
    """(images, prompts, sources or None) of a request body; SolrlError in one line for anything else."""
    from safetensors.numpy import load

    try:
        header_length = int.from_bytes(body[:8], "little")
        metadata = json.loads(body[8:8 + header_length]).get("__metadata__") or {}
        prompts = json.loads(metadata[PROMPTS])
        tensors = load(body)
        images, sources = tensors[IMAGES], tensors.get(SOURCES)
    except Exception as exc:  # noqa: BLE001 - whatever a malformed body raises, it is one line back to the client
        raise SolrlError(f"not a scoring request (a safetensors body with '{IMAGES}' and its '{PROMPTS}' "
                         f"metadata): {type(exc).__name__}: {exc}") from None
    if images.dtype != np.uint8 or not isinstance(prompts, list) or len(prompts) != len(images):
        raise SolrlError(f"a scoring request needs uint8 images and one prompt each (got {images.dtype}, "
                         f"{len(images)} images, {len(prompts) if isinstance(prompts, list) else 'no'} prompts)")
    if sources is not None and (sources.dtype != np.uint8 or sources.ndim != 5 or len(sources) != len(images)):
        raise SolrlError(f"a scoring request's sources need uint8 (B, sources, H, W, 3), one row an image (got "
                         f"{sources.dtype} {tuple(sources.shape)} for {len(images)} images)")
    return images, [str(p) for p in prompts], sources
