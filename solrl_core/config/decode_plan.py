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

`decode_plan` is a config's plan, `decode_fraction` the share of the full decode's work it leaves (the planner prices
the explore's decode with it); models/explore_decode.py decodes a batch under a plan.
"""

from __future__ import annotations

from solrl_core.frames import evenly_spaced
from solrl_core.models.backbones.registry import kind_spec
from solrl_core.models.explore_decode import DecodePlan


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
    spec = spec or kind_spec(cfg.model.kind)
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
    spec = spec or kind_spec(cfg.model.kind)
    frames = 1.0
    if plan.latent_frames is not None:
        frames = plan.latent_frames / spec.latent_frames_at(plan.total_frames)
    return plan.scale ** 2 * frames
