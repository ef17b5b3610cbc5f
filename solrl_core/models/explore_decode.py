"""The explore's decode made cheaper (`explore.decode`), on a batch of latents: `DecodePlan` says what to decode
(which latent frames, at what scale), `decode_samples` decodes under it. What a config's plan is, and the share of the
decode it leaves, is config/decode_plan.py's; why and what it costs: docs/method.md (explore policies).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DecodePlan:
    """How the explore decodes: `scale` of the latent's height and width, and `latent_frames` of its latent frames
    (None: every one), which make the first `frames` frames of its `total_frames`."""

    scale: float = 1.0
    latent_frames: int | None = None
    frames: int | None = None
    total_frames: int | None = None

    @property
    def full(self) -> bool:
        return self.scale == 1.0 and self.latent_frames is None

    def record(self) -> dict:
        """What the explore pool keeps of it (nothing for the full decode)."""
        if self.full:
            return {}
        return {"explore_decode": {"scale": self.scale,
                                   "decoded_frames": self.frames if self.latent_frames is not None else None}}


def decode_samples(backbone, latents, plan: DecodePlan | None) -> np.ndarray:
    """`backbone.decode(latents)` under `plan` (None or a full plan: that decode itself): uint8 images (B, H, W, 3)
    or videos (B, frames, H, W, 3) of the full decode's shape."""
    import torch
    import torch.nn.functional as F

    if plan is None or plan.full:
        return backbone.decode(latents)
    z = latents if plan.latent_frames is None else latents[:, :, :plan.latent_frames]
    side = tuple(z.shape[-2:])
    if plan.scale != 1.0:
        small = tuple(max(1, round(n * plan.scale)) for n in side)
        z = F.interpolate(z.float(), size=(*z.shape[2:-2], *small), mode="area").to(latents.dtype)
    out = backbone.decode(z)
    if plan.scale != 1.0:  # back to the size of the full decode: the same per-pixel factor as the latent's
        height, width = (out.shape[-3] * side[0] // z.shape[-2], out.shape[-2] * side[1] // z.shape[-1])
        flat = torch.from_numpy(out.reshape(-1, *out.shape[-3:])).permute(0, 3, 1, 2).float()
        flat = F.interpolate(flat, size=(height, width), mode="bilinear", align_corners=False)
        out = flat.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy().reshape(
            *out.shape[:-3], height, width, 3)
    if plan.latent_frames is not None:  # the frames not decoded hold the last decoded one
        kept = out[:, :plan.frames]
        out = np.concatenate([kept, np.repeat(kept[:, -1:], plan.total_frames - plan.frames, axis=1)], axis=1)
    return np.ascontiguousarray(out)
