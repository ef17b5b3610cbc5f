"""Labelled image grids: one row per prompt, the prompt written above its row, each image with its caption (its
reward and its rank) below it, large enough to see a shape. Every grid solrl writes (best/worst per iteration, the
evaluation samples, the pool grids in MLflow) is drawn here. A video sample (frames, H, W, 3) is drawn as a strip of
a few of its frames (`frame_strip`), each frame as large as an image would be; `animated_grid` draws every frame."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from solrl_core.frames import evenly_spaced

WHITE, INK, GREY = (255, 255, 255), (20, 20, 20), (110, 110, 110)
MIN_TILE = 96  # pixels on the longer side of every image in a grid: enough to see a 32 px sample's shapes
PAD = 4
STRIP_FRAMES = 4  # frames of a video shown in a still: the first, the last and evenly spaced ones between


@dataclass(frozen=True)
class Tile:
    """One image of a grid and the line written under it."""

    image: np.ndarray  # (H, W, 3) uint8, or a video's (frames, H, W, 3)
    caption: str

    @property
    def still(self) -> np.ndarray:
        """What a still grid draws: the image, or the video's frame strip."""
        return frame_strip(self.image)

    @property
    def frames(self) -> int:
        """How many frames the still shows side by side (1 for an image)."""
        return frame_count(self.image)


def frame_count(image: np.ndarray) -> int:
    return min(STRIP_FRAMES, image.shape[0]) if np.ndim(image) == 4 else 1


def frame_strip(image: np.ndarray) -> np.ndarray:
    """An image unchanged; a video (frames, H, W, 3) as STRIP_FRAMES of its frames (first, last, evenly spaced
    between) side by side, one pixel of white between them."""
    image = np.asarray(image, np.uint8)
    if image.ndim != 4:
        return image
    picked = evenly_spaced(image.shape[0], STRIP_FRAMES)
    gap = np.full((image.shape[1], 1, 3), 255, np.uint8)
    parts = [part for i in picked for part in (image[i], gap)][:-1]
    return np.concatenate(parts, axis=1)


@lru_cache(maxsize=None)
def _font(size: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def fitted_size(shape: tuple[int, ...], tile: int, frames: int = 1) -> tuple[int, int]:
    """(width, height) of an image of `shape` (H, W, ...) resized so that the longer side of each of its `frames`
    side-by-side frames is `tile` pixels."""
    h, w = shape[:2]
    longer = max(h, w / frames)
    return max(1, round(w * tile / longer)), max(1, round(h * tile / longer))


def fit_tile(image: np.ndarray, tile: int, frames: int = 1) -> np.ndarray:
    """`image` resized so its longer side (of each of its `frames` side-by-side frames: a frame strip) is `tile`
    pixels: nearest neighbour when enlarging (small samples stay crisp), Lanczos when shrinking."""
    from PIL import Image

    h, w = image.shape[:2]
    size = fitted_size(image.shape, tile, frames)
    if size == (w, h):
        return image
    method = Image.Resampling.NEAREST if size[0] >= w else Image.Resampling.LANCZOS
    return np.asarray(Image.fromarray(image).resize(size, method))


def rank_captions(rewards: Sequence[float]) -> list[str]:
    """Captions of one prompt's images in their own order: the reward and the rank by it ("best", "worst", or
    "#r" counted from the best; ties keep the images' order)."""
    rewards = np.asarray(rewards, np.float64)
    order = np.argsort(-rewards, kind="stable")
    rank = np.empty(len(rewards), int)
    rank[order] = np.arange(1, len(rewards) + 1)
    out = []
    for reward, r in zip(rewards, rank):
        label = "best" if r == 1 else "worst" if r == len(rewards) else f"#{r}"
        out.append(f"{label} · {reward:.3f}" if len(rewards) > 1 else f"{reward:.3f}")
    return out


@dataclass(frozen=True)
class Layout:
    """Where a grid's parts go: its size, and per row the prompt's lines and the top-left corner of each image."""

    width: int
    height: int
    rows: list[tuple[list[str], int, list[tuple[int, int]]]]  # (prompt lines, text top, image corners (x, y))
    tile: int
    font_size: int


def grid_layout(rows: Sequence[tuple[str, Sequence[Tile | None]]], tile: int = MIN_TILE) -> Layout:
    """The layout `labelled_grid` draws `rows` with (images `tile` px on the longer side, at least MIN_TILE)."""
    tile = max(tile, MIN_TILE)
    size = max(11, tile // 8)
    cell, line_h = tile + PAD, size + 4
    gap = tile // 4  # the width a `None` tile leaves

    def corners_x(tiles) -> list[int]:
        xs, x = [], PAD
        for t in tiles:
            xs.append(x)
            x += gap if t is None else cell if t.frames == 1 else fitted_size(t.still.shape, tile, t.frames)[0] + PAD
        return xs + [x]

    width = max([corners_x(tiles)[-1] for _, tiles in rows] + [cell + PAD])
    chars = max(16, int(width / (0.55 * size)))
    placed, top = [], PAD
    for prompt, tiles in rows:
        lines = textwrap.wrap(prompt, chars, max_lines=2, placeholder=" …") or [""]
        y = top + len(lines) * line_h
        placed.append((lines, top, [(x, y) for x in corners_x(tiles)[:-1]]))
        top = y + cell + line_h + PAD
    return Layout(width, max(top, cell), placed, tile, size)


def labelled_grid(rows: Sequence[tuple[str, Sequence[Tile | None]]], tile: int = MIN_TILE) -> np.ndarray:
    """A uint8 (H, W, 3) image of `rows`: (prompt, tiles) each, a `None` tile leaving a gap (e.g. between the best
    and the worst). Images are resized to `tile` pixels on their longer side (at least MIN_TILE); see grid_layout."""
    from PIL import Image, ImageDraw

    layout = grid_layout(rows, tile)
    font, small = _font(layout.font_size), _font(max(10, layout.font_size - 1))
    line_h = layout.font_size + 4
    canvas = Image.new("RGB", (layout.width, layout.height), WHITE)
    draw = ImageDraw.Draw(canvas)
    for (_, tiles), (lines, top, corners) in zip(rows, layout.rows):
        for i, line in enumerate(lines):
            draw.text((PAD, top + i * line_h), line, fill=INK, font=font)
        for t, (x, y) in zip(tiles, corners):
            if t is None:
                continue
            image = fit_tile(t.still, layout.tile, t.frames)
            canvas.paste(Image.fromarray(image), (x, y))
            draw.text((x, y + image.shape[0] + 2), t.caption, fill=GREY, font=small)
    return np.asarray(canvas)


def animated_grid(rows: Sequence[tuple[str, Sequence[Tile | None]]], tile: int = MIN_TILE) -> list[np.ndarray]:
    """One `labelled_grid` per frame of the rows' videos (uint8 (H, W, 3) each, all the same size): the frames of an
    animated preview. Every video tile must have the same number of frames."""
    lengths = {t.image.shape[0] for _, tiles in rows for t in tiles if t is not None and np.ndim(t.image) == 4}
    if len(lengths) != 1:
        raise ValueError(f"animated_grid needs videos of one length (got frame counts {sorted(lengths)})")
    return [labelled_grid([(prompt, [None if t is None else Tile(t.image[i], t.caption) for t in tiles])
                           for prompt, tiles in rows], tile) for i in range(lengths.pop())]


def save_gif(frames: Sequence[np.ndarray], path, fps: float = 8.0) -> None:
    """An animated GIF of `frames` (uint8 (H, W, 3) each), looping, at `fps` frames per second."""
    from PIL import Image

    images = [Image.fromarray(np.asarray(f, np.uint8)) for f in frames]
    images[0].save(path, format="GIF", save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
