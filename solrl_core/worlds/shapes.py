"""Procedural scenes for the embedded model: coloured shapes on a plain dark background, and their prompt grammar.

A scene is (colour, shape, count, position). The grammar has exactly one prompt per scene:

    count 1:    "a red circle" | "a red circle on the left" | "... on the right" | "... at the top" | "... at the bottom"
    count 2/3:  "two red circles"  |  "three red circles"

Rendering is numpy only, anti-aliased by drawing at `SUPERSAMPLE`x resolution and averaging down. Every random choice
(sizes, positions, a small per-object colour jitter) comes from the numpy Generator passed in, so a scene drawn with
generators in the same state gives the same pixels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from solrl_core.errors import SolrlError

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (235, 50, 50),
    "yellow": (235, 215, 45),
    "green": (50, 205, 70),
    "cyan": (45, 210, 225),
    "blue": (60, 90, 245),
    "magenta": (220, 60, 220),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
COUNTS: dict[int, str] = {1: "a", 2: "two", 3: "three"}
POSITIONS: dict[str, str] = {
    "left": "on the left",
    "right": "on the right",
    "top": "at the top",
    "bottom": "at the bottom",
}
BACKGROUND: tuple[int, int, int] = (14, 14, 20)
SUPERSAMPLE = 4
COLOUR_JITTER = 8  # max per-channel deviation of an object's colour, in 0..255 units

# Object size (side of its bounding box) as a fraction of the resolution, per count.
_SIZE_RANGE = {1: (0.30, 0.42), 2: (0.24, 0.32), 3: (0.20, 0.27)}
# A positioned object's centre lies within this fraction of the image from the named edge.
POSITION_BAND = 0.33
_GAP_PX = 2.0  # minimum empty space between two objects' bounding boxes, in output pixels


@dataclass(frozen=True)
class Scene:
    colour: str
    shape: str
    count: int
    position: str | None = None

    def __post_init__(self):
        if self.colour not in COLOURS or self.shape not in SHAPES or self.count not in COUNTS:
            raise SolrlError(f"invalid scene {self!r}")
        if self.position is not None and (self.position not in POSITIONS or self.count != 1):
            raise SolrlError(f"invalid scene {self!r}: a position is only allowed with count 1")

    @property
    def prompt(self) -> str:
        noun = self.shape if self.count == 1 else self.shape + "s"
        words = [COUNTS[self.count], self.colour, noun]
        if self.position is not None:
            words.append(POSITIONS[self.position])
        return " ".join(words)


def make_prompt(colour: str, shape: str, count: int = 1, position: str | None = None) -> str:
    return Scene(colour, shape, count, position).prompt


def parse_prompt(prompt: str) -> Scene:
    """The scene a grammar prompt describes (case and surrounding spaces ignored); SolrlError outside the grammar."""
    scene = _prompt_table().get(" ".join(str(prompt).lower().split()))
    if scene is None:
        raise SolrlError(
            f"prompt {prompt!r} is outside the embedded grammar "
            "(e.g. 'a red circle on the left', 'two blue squares', 'three yellow triangles')"
        )
    return scene


def all_scenes() -> list[Scene]:
    scenes = []
    for colour in COLOURS:
        for shape in SHAPES:
            for position in (None, *POSITIONS):
                scenes.append(Scene(colour, shape, 1, position))
            scenes.extend(Scene(colour, shape, n) for n in (2, 3))
    return scenes


def all_prompts() -> list[str]:
    return [s.prompt for s in all_scenes()]


def _is_held_out(scene: Scene) -> bool:
    """Deterministic ~20% hold-out spread over every attribute: each (colour, shape) pair keeps 5-6 of its 7 layouts."""
    colour = list(COLOURS).index(scene.colour)
    shape = SHAPES.index(scene.shape)
    layout = (None, *POSITIONS, "2", "3").index(scene.position if scene.count == 1 else str(scene.count))
    return (colour + 2 * shape + layout) % 5 == 0


def train_prompts() -> list[str]:
    return [s.prompt for s in all_scenes() if not _is_held_out(s)]


def test_prompts() -> list[str]:
    return [s.prompt for s in all_scenes() if _is_held_out(s)]


def vocabulary() -> list[str]:
    """Every word of the grammar, sorted."""
    return sorted({word for prompt in all_prompts() for word in prompt.split()})


@lru_cache(maxsize=1)
def _prompt_table() -> dict[str, Scene]:
    return {s.prompt: s for s in all_scenes()}


# ---------------------------------------------------------------------------------------------------- rendering


def _shape_mask(shape: str, xs: np.ndarray, ys: np.ndarray, cx: float, cy: float, size: float) -> np.ndarray:
    """Boolean inside-test at points (xs, ys); the shape fills a size x size box centred at (cx, cy)."""
    half = size / 2
    if shape == "circle":
        return (xs - cx) ** 2 + (ys - cy) ** 2 <= half**2
    if shape == "square":
        return (np.abs(xs - cx) <= half) & (np.abs(ys - cy) <= half)
    # upward triangle: apex at the top centre, base along the bottom edge
    depth = ys - (cy - half)
    return (depth >= 0) & (ys <= cy + half) & (np.abs(xs - cx) <= depth / 2)


def _place(scene: Scene, rng: np.random.Generator, res: int) -> list[tuple[float, float, float]]:
    """(cx, cy, size) in output pixels for each object: inside the image, in the named band, boxes apart."""
    lo, hi = _SIZE_RANGE[scene.count]
    base = rng.uniform(lo, hi) * res
    sizes = [base * rng.uniform(0.9, 1.1) if scene.count > 1 else base for _ in range(scene.count)]
    for _ in range(1000):
        objects = []
        for size in sizes:
            margin = size / 2 + 1.0
            x_range = [margin, res - margin]
            y_range = [margin, res - margin]
            band = POSITION_BAND * res
            if scene.position == "left":
                x_range[1] = band
            elif scene.position == "right":
                x_range[0] = res - band
            elif scene.position == "top":
                y_range[1] = band
            elif scene.position == "bottom":
                y_range[0] = res - band
            objects.append((rng.uniform(*x_range), rng.uniform(*y_range), size))
        if all(
            max(abs(a[0] - b[0]), abs(a[1] - b[1])) >= (a[2] + b[2]) / 2 + _GAP_PX
            for i, a in enumerate(objects)
            for b in objects[i + 1 :]
        ):
            return objects
    raise RuntimeError(f"could not place {scene.prompt!r} at resolution {res}")  # pragma: no cover


def render_scene(scene: Scene | str, rng: np.random.Generator, resolution: int = 32) -> np.ndarray:
    """One image, uint8 (resolution, resolution, 3)."""
    if isinstance(scene, str):
        scene = parse_prompt(scene)
    if resolution < 16:
        raise SolrlError(f"resolution must be >= 16, got {resolution}")
    image = blank_image(resolution)
    for cx, cy, size in _place(scene, rng, resolution):
        draw_object(image, scene.shape, object_colour(scene.colour, rng), cx, cy, size)
    return np.round(image).astype(np.uint8)


def blank_image(resolution: int) -> np.ndarray:
    """The background, float32 (resolution, resolution, 3), to draw objects on."""
    image = np.empty((resolution, resolution, 3), dtype=np.float32)
    image[:] = BACKGROUND
    return image


def object_colour(colour: str, rng: np.random.Generator) -> np.ndarray:
    """The palette colour with a small per-object jitter."""
    return np.clip(np.array(COLOURS[colour]) + rng.integers(-COLOUR_JITTER, COLOUR_JITTER + 1, 3), 0, 255)


def draw_object(image: np.ndarray, shape: str, colour: np.ndarray, cx: float, cy: float, size: float) -> None:
    """Draw a `shape` filling a size x size box centred at (cx, cy) onto the float `image`, anti-aliased."""
    resolution, ss = image.shape[0], SUPERSAMPLE
    x0, x1 = max(int(cx - size / 2) - 1, 0), min(int(cx + size / 2) + 2, resolution)
    y0, y1 = max(int(cy - size / 2) - 1, 0), min(int(cy + size / 2) + 2, resolution)
    # sub-pixel sample centres of the object's window
    xs = x0 + (np.arange((x1 - x0) * ss) + 0.5) / ss
    ys = y0 + (np.arange((y1 - y0) * ss) + 0.5) / ss
    inside = _shape_mask(shape, xs[None, :], ys[:, None], cx, cy, size)
    alpha = inside.reshape(y1 - y0, ss, x1 - x0, ss).mean(axis=(1, 3))[..., None]
    window = image[y0:y1, x0:x1]
    image[y0:y1, x0:x1] = window * (1 - alpha) + colour * alpha


def render_batch(prompts: Sequence[str], rng: np.random.Generator, resolution: int = 32) -> np.ndarray:
    """Images for the prompts, in order, uint8 (B, resolution, resolution, 3)."""
    return np.stack([render_scene(p, rng, resolution) for p in prompts])
