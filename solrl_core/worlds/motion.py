"""The embedded video world: one coloured shape moving in a straight line on the dark background, and its prompts.

A scene is (colour, shape, direction); its one prompt is "a red circle moving left" (left, right, up or down). A video
of `frames` frames shows the shape travelling TRAVEL of the frame's side along the direction, at a constant speed,
from a start drawn so that the whole path stays inside the frame (the other coordinate anywhere inside). Drawn with
the image world's renderer (solrl_core/worlds/shapes.py), so one frame is one of its images.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.worlds import shapes

DIRECTIONS: dict[str, tuple[int, int]] = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}  # (dx, dy)
FRAMES = 4  # frames of a video of the shipped video model
TRAVEL = 0.4  # how far the shape moves from the first frame to the last, as a fraction of the side
_SIZE_RANGE = (0.26, 0.34)  # the shape's side as a fraction of the frame's


@dataclass(frozen=True)
class MotionScene:
    colour: str
    shape: str
    direction: str

    def __post_init__(self):
        if self.colour not in shapes.COLOURS or self.shape not in shapes.SHAPES or self.direction not in DIRECTIONS:
            raise SolrlError(f"invalid motion scene {self!r}")

    @property
    def prompt(self) -> str:
        return f"a {self.colour} {self.shape} moving {self.direction}"

    @property
    def still_prompt(self) -> str:
        """What one frame shows, in the image world's grammar ("a red circle")."""
        return shapes.make_prompt(self.colour, self.shape)


def all_scenes() -> list[MotionScene]:
    return [MotionScene(c, s, d) for c in shapes.COLOURS for s in shapes.SHAPES for d in DIRECTIONS]


def _is_held_out(scene: MotionScene) -> bool:
    """A deterministic sixth of the combinations, spread over every attribute: each (colour, shape) pair keeps 3 or
    4 of its 4 directions, so a held-out prompt is a new combination of seen words."""
    colour = list(shapes.COLOURS).index(scene.colour)
    shape = shapes.SHAPES.index(scene.shape)
    direction = list(DIRECTIONS).index(scene.direction)
    return (colour + 2 * shape + direction) % 6 == 0


def all_prompts() -> list[str]:
    return [s.prompt for s in all_scenes()]


def train_prompts() -> list[str]:
    return [s.prompt for s in all_scenes() if not _is_held_out(s)]


def test_prompts() -> list[str]:
    return [s.prompt for s in all_scenes() if _is_held_out(s)]


@lru_cache(maxsize=1)
def _prompt_table() -> dict[str, MotionScene]:
    return {s.prompt: s for s in all_scenes()}


def parse_prompt(prompt: str) -> MotionScene:
    """The scene a motion prompt describes (case and surrounding spaces ignored); SolrlError outside the grammar."""
    scene = _prompt_table().get(" ".join(str(prompt).lower().split()))
    if scene is None:
        raise SolrlError(f"prompt {prompt!r} is outside the embedded motion grammar (e.g. 'a red circle moving left', "
                         "'a blue square moving up')")
    return scene


def render_video(scene: MotionScene | str, rng: np.random.Generator, frames: int = FRAMES,
                 resolution: int = 32) -> np.ndarray:
    """One video, uint8 (frames, resolution, resolution, 3)."""
    if isinstance(scene, str):
        scene = parse_prompt(scene)
    if frames < 2:
        raise SolrlError(f"a motion video needs at least 2 frames, got {frames}")
    size = rng.uniform(*_SIZE_RANGE) * resolution
    colour = shapes.object_colour(scene.colour, rng)
    dx, dy = DIRECTIONS[scene.direction]
    travel = TRAVEL * resolution
    margin = size / 2 + 1.0
    lo, hi = margin, resolution - margin
    start = [rng.uniform(lo, hi), rng.uniform(lo, hi)]
    for axis, d in ((0, dx), (1, dy)):  # along the motion: room for the whole path
        if d:
            start[axis] = rng.uniform(lo, hi - travel) if d > 0 else rng.uniform(lo + travel, hi)
    video = []
    for f in range(frames):
        step = travel * f / (frames - 1)
        image = shapes.blank_image(resolution)
        shapes.draw_object(image, scene.shape, colour, start[0] + dx * step, start[1] + dy * step, size)
        video.append(np.round(image).astype(np.uint8))
    return np.stack(video)


def render_batch(prompts: Sequence[str], rng: np.random.Generator, frames: int = FRAMES,
                 resolution: int = 32) -> np.ndarray:
    """Videos for the prompts, in order, uint8 (B, frames, resolution, resolution, 3)."""
    return np.stack([render_video(p, rng, frames, resolution) for p in prompts])
