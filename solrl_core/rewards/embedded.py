"""Programmatic prompt-match reward for the embedded shapes world: no weights, continuous, in [0, 1].

Per image, from a soft foreground alpha (brightness above the dark background) and its connected components:
  colour      mean over foreground pixels of a soft nearest-colour classifier's probability of the target colour
              (chromaticity = rgb / max channel, so anti-aliased edges keep their colour; white is a distractor class)
  count       exp(-|n - target| / 0.35), n = soft component count (specks under SPECK_AREA count 0, full at FULL_AREA)
  shape       per component, a soft classifier over (fill of its bounding box, vertical centroid offset):
              circle ~ (0.79, 0), square ~ (1, 0), upward triangle ~ (0.59, +0.14); area-weighted probability of target
  position    (only when the prompt names one) sigmoid of how far the foreground centroid is past the image middle
  background  exp(-mean |pixel - background colour| / 0.05) over pixels away from the objects (specks count as dirt)
reward = weighted geometric mean of the components (each floored at 1e-4), so one clearly wrong attribute pulls it down.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solrl_core.worlds.shapes import BACKGROUND, COLOURS, SHAPES, parse_prompt

WEIGHTS = {"colour": 0.25, "count": 0.25, "shape": 0.25, "position": 0.15, "background": 0.10}
FLOOR = 1e-4  # low enough that a poor-but-improving component still ranks samples (1e-4 ** 0.25 = 0.1)
_BG = np.array(BACKGROUND, dtype=np.float32) / 255.0
_FG_FULL = 0.75  # max channel of a fully covered object pixel (every palette colour reaches at least ~0.77)
_HARD = 0.5  # alpha above which a pixel belongs to a component
SPECK_AREA = 3.0  # components up to this many pixels (at 32x32) are ignored by count and shape
FULL_AREA = 10.0  # ... and count fully from this many pixels
_COLOUR_PROTOS = np.array([np.array(c) / max(c) for c in COLOURS.values()] + [[1.0, 1.0, 1.0]], dtype=np.float32)
_COLOUR_TEMP = 0.03
# (fill, offset) of anti-aliased renders (measured; the ideal shapes give 0.785, 1 and 0.5 fill, 1/6 offset)
_SHAPE_PROTOS = np.array([[0.79, 0.0], [1.0, 0.0], [0.59, 0.14]])  # order of SHAPES: circle, square, triangle
_SHAPE_SCALE = np.array([0.09, 0.05])  # soft: a blob (fill ~0.75) still earns a little "square", more as it fills out
_POS_MID, _POS_SCALE = 0.47, 0.035
_STRUCT8 = np.ones((3, 3), dtype=bool)


def _alpha(image: np.ndarray) -> np.ndarray:
    """Soft foreground coverage in [0, 1] from the brightest channel."""
    brightest = image.max(axis=-1)
    return np.clip((brightest - _BG.max()) / (_FG_FULL - _BG.max()), 0.0, 1.0)


def _colour_score(image: np.ndarray, alpha: np.ndarray, colour: str) -> float:
    weights = alpha * (alpha > 0.25)
    if weights.sum() < 1e-6:
        return 0.0
    pixels = image[weights > 0]
    chroma = pixels / np.maximum(pixels.max(axis=-1, keepdims=True), 1e-6)
    d2 = ((chroma[:, None, :] - _COLOUR_PROTOS[None]) ** 2).sum(-1)
    logits = -d2 / _COLOUR_TEMP
    logits -= logits.max(axis=1, keepdims=True)
    prob = np.exp(logits)
    prob /= prob.sum(axis=1, keepdims=True)
    target = prob[:, list(COLOURS).index(colour)]
    w = weights[weights > 0]
    return float((target * w).sum() / w.sum())


def _shape_features(alpha: np.ndarray) -> tuple[float, float]:
    """(fill of the soft bounding box, vertical centroid offset / height) of one component's alpha patch."""
    width = alpha.max(axis=0).sum()
    height = alpha.max(axis=1).sum()
    mass = alpha.sum()
    fill = mass / max(width * height, 1e-6)
    rows = np.arange(alpha.shape[0]) + 0.5
    row_profile = alpha.max(axis=1)
    box_centre = (rows * row_profile).sum() / max(row_profile.sum(), 1e-6)
    mass_centre = (rows * alpha.sum(axis=1)).sum() / max(mass, 1e-6)
    return float(fill), float((mass_centre - box_centre) / max(height, 1e-6))


def shape_probabilities(features: np.ndarray) -> np.ndarray:
    """Soft classifier over SHAPES for rows of (fill, offset) features."""
    d2 = (((features[:, None, :] - _SHAPE_PROTOS[None]) / _SHAPE_SCALE) ** 2).sum(-1)
    logits = -d2 / 2
    logits -= logits.max(axis=1, keepdims=True)
    prob = np.exp(logits)
    return prob / prob.sum(axis=1, keepdims=True)


def _components(alpha: np.ndarray, area_scale: float):
    """Labels and, per component, (label, soft weight, area) for the hard foreground."""
    from scipy import ndimage  # here, not at the top: loading a config imports this module (0.4 s)

    labels, n = ndimage.label(alpha > _HARD, structure=_STRUCT8)
    if n == 0:
        return labels, []
    areas = ndimage.sum_labels(np.ones_like(alpha), labels, index=np.arange(1, n + 1))
    speck, full = SPECK_AREA * area_scale, FULL_AREA * area_scale
    weights = np.clip((areas - speck) / (full - speck), 0.0, 1.0)
    return labels, [(i + 1, float(w), float(a)) for i, (w, a) in enumerate(zip(weights, areas))]


def _score_one(image_u8: np.ndarray, prompt: str) -> dict[str, float]:
    from scipy import ndimage  # here, not at the top: loading a config imports this module (0.4 s)

    scene = parse_prompt(prompt)
    image = image_u8.astype(np.float32) / 255.0
    h, w = image.shape[:2]
    area_scale = (h * w) / (32 * 32)
    alpha = _alpha(image)
    labels, comps = _components(alpha, area_scale)
    kept = [c for c in comps if c[1] > 0]

    soft_count = sum(c[1] for c in kept)
    scores = {
        "colour": _colour_score(image, alpha, scene.colour),
        "count": float(np.exp(-abs(soft_count - scene.count) / 0.35)),
    }

    # shape: classify each kept component from its alpha inside its (1 px padded) bounding box
    if kept:
        objects = ndimage.find_objects(labels)
        feats, wts = [], []
        near = ndimage.binary_dilation(labels > 0, structure=_STRUCT8)
        for label, weight, area in kept:
            sl = objects[label - 1]
            sl = tuple(slice(max(s.start - 1, 0), s.stop + 1) for s in sl)
            own = ndimage.binary_dilation(labels[sl] == label, structure=_STRUCT8) & near[sl]
            feats.append(_shape_features(alpha[sl] * own))
            wts.append(weight * area)
        probs = shape_probabilities(np.array(feats))[:, SHAPES.index(scene.shape)]
        scores["shape"] = float(np.average(probs, weights=wts))
    else:
        scores["shape"] = 0.0

    if scene.position is not None:
        scores["position"] = _position_score(alpha, scene.position)

    objects_mask = np.isin(labels, [c[0] for c in kept]) if kept else np.zeros_like(alpha, dtype=bool)
    away = ~ndimage.binary_dilation(objects_mask, structure=_STRUCT8, iterations=1)
    if away.any():
        deviation = np.abs(image[away] - _BG).mean()
        scores["background"] = float(np.exp(-deviation / 0.05))
    else:
        scores["background"] = 0.0

    total_weight = sum(WEIGHTS[k] for k in scores)
    log_reward = sum(WEIGHTS[k] * np.log(max(v, FLOOR)) for k, v in scores.items()) / total_weight
    scores["reward"] = float(np.exp(log_reward))
    return scores


def _position_score(alpha: np.ndarray, position: str) -> float:
    """The sigmoid of how far the foreground's centroid is past the image's middle towards the `position` edge."""
    mass = alpha.sum()
    if mass < 1e-6:
        return 0.0
    h, w = alpha.shape
    cy = (alpha.sum(axis=1) * (np.arange(h) + 0.5)).sum() / mass / h
    cx = (alpha.sum(axis=0) * (np.arange(w) + 0.5)).sum() / mass / w
    past = {"left": 1 - cx, "right": cx, "top": 1 - cy, "bottom": cy}[position]
    return float(1 / (1 + np.exp(-(past - (1 - _POS_MID)) / _POS_SCALE)))


def position_score(image_u8: np.ndarray, position: str) -> float:
    """The prompt-match reward's position component of a uint8 image (H, W, 3) for "left", "right", "top" or
    "bottom"."""
    return _position_score(_alpha(image_u8.astype(np.float32) / 255.0), position)


def foreground_centroid(image_u8: np.ndarray) -> tuple[float, float] | None:
    """(x, y) in pixels of the foreground's alpha-weighted centroid of a uint8 image (H, W, 3); None if it is empty."""
    alpha = _alpha(image_u8.astype(np.float32) / 255.0)
    mass = alpha.sum()
    if mass < 1e-6:
        return None
    h, w = alpha.shape
    return (float((alpha.sum(axis=0) * (np.arange(w) + 0.5)).sum() / mass),
            float((alpha.sum(axis=1) * (np.arange(h) + 0.5)).sum() / mass))


def foreground_box(image_u8: np.ndarray) -> tuple[float, float, float, float] | None:
    """(left, top, right, bottom) in pixels of the pixels more than half covered by the foreground of a uint8 image
    (H, W, 3) (the box of every object together); None if there are none."""
    rows, cols = np.nonzero(_alpha(image_u8.astype(np.float32) / 255.0) > _HARD)
    if len(rows) == 0:
        return None
    return float(cols.min()), float(rows.min()), float(cols.max() + 1), float(rows.max() + 1)


def prompt_match_reward(images: np.ndarray, prompts: Sequence[str]) -> dict[str, np.ndarray]:
    """Reward of uint8 images (B, H, W, 3) for their prompts: {"reward": (B,), and each component (B,)}.

    The "position" component is 1.0 for prompts that name no position (it does not enter their reward).
    """
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"images must be (B, H, W, 3), got {images.shape}")
    if len(prompts) != len(images):
        raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
    rows = [_score_one(img, p) for img, p in zip(images, prompts)]
    keys = ("reward", *WEIGHTS)
    return {k: np.array([r.get(k, 1.0) for r in rows], dtype=np.float64) for k in keys}
