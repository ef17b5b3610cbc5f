"""A cheaper decode for the explore (`explore.decode`): the explore's samples are decoded only to be scored and
ranked, so on video, where the VAE decode of every explored candidate can cost more than its 4-bit denoising, it
decodes less. The regenerate, the update and the evaluation always decode in full.

* `frames: scored` decodes only the frames the training rewards read: an image reward with
  `reward_models.<name>.video_frames: 1` scores the first frame (Flow-Factory's CLIP score), and a decoder causal in
  time (Wan's, `BackboneSpec.causal_decoder`) makes a video's first frames from its first latent frames exactly.
  The frames after the last scored one are not decoded; the pool holds the last decoded frame in their place.
  A reward that scores whole videos, or an image reward on every frame, reads the last frame: nothing is saved.
* `scale: s` decodes the latents resized to s of their height and width (area averaging), then resizes the frames
  back to the sample's size (bilinear), so the pool and the rewards see the usual shape: the decode costs about s²,
  and the rewards score a softer image. Ranking fidelity says what it loses (`solrl calibrate-explore`).

`decode_fraction` is the share of the full decode's work the plan leaves (the planner prices the explore's decode
with it); `decode_samples` decodes a batch under a plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solrl_core.frames import evenly_spaced


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


def model_spec(kind: str):
    """The backbone spec of a registered model kind (the first of its specs; they share their VAE's layout), None
    for a plug-in kind."""
    from solrl_core.models.backbones.registry import is_plugin, specs_of_kind

    return None if is_plugin(kind) else specs_of_kind(kind)[0]


def last_scored_frame(cfg, frames: int) -> int:
    """The last frame index of a `frames`-frame video that a training reward reads: an image reward reads its
    `video_frames` evenly spaced frames (the first alone, or the last among them), a video reward every frame."""
    from solrl_core.rewards.registry import reward_class, spec_for

    last = 0
    for name in cfg.rewards:
        if reward_class(name).takes_videos:
            return frames - 1
        last = max(last, int(evenly_spaced(frames, spec_for(name, cfg.reward_models).video_frames)[-1]))
    return last


def decode_plan(cfg, spec=None) -> DecodePlan:
    """The explore's `DecodePlan` for the config's model (or `spec`, a backbone spec to price it on instead: the
    planner's full-size model, at that model's frames)."""
    decode = cfg.explore.decode
    spec = spec or model_spec(cfg.model.kind)
    if decode.frames == "all" or spec is None or spec.defaults.frames is None:
        return DecodePlan(decode.scale)
    total = (cfg.model.frames if spec.kind == cfg.model.kind else None) or spec.defaults.frames
    needed = spec.latent_frames_for(last_scored_frame(cfg, total) + 1)
    if needed >= spec.latent_frames_at(total):
        return DecodePlan(decode.scale)
    made = min(total, (needed - 1) * spec.temporal_compression + 1)
    return DecodePlan(decode.scale, needed, made, total)


def decode_fraction(cfg, spec=None) -> float:
    """The share of the full decode's work the config's explore decode leaves: the scale squared times the share
    of latent frames decoded (the decoder's work grows with both)."""
    plan = decode_plan(cfg, spec)
    spec = spec or model_spec(cfg.model.kind)
    frames = 1.0
    if plan.latent_frames is not None:
        frames = plan.latent_frames / spec.latent_frames_at(plan.total_frames)
    return plan.scale ** 2 * frames


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
