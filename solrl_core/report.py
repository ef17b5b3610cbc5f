"""Pictures and tables people look at: best/worst candidate grids, per-prompt pool summaries."""

from __future__ import annotations

import numpy as np

from solrl_core.pool import read_rows, read_table


def best_worst_grid(pool_path, reward: np.ndarray, n_prompts: int, n_show: int = 4, scale: int = 3) -> np.ndarray:
    """Rows: for each of the first `n_prompts` prompts, its `n_show` best then `n_show` worst candidates (by reward),
    separated by a gap. Returns a uint8 (H, W, 3) image, upscaled `scale`× with nearest neighbour."""
    cols, _ = read_table(pool_path, ["prompt_index"])
    prompt_index = cols["prompt_index"]
    rows = []
    for p in sorted(set(prompt_index.tolist()))[:n_prompts]:
        members = np.flatnonzero(prompt_index == p)
        order = members[np.argsort(-reward[members], kind="stable")]
        show = min(n_show, len(order) // 2 or 1)
        picked = np.concatenate([order[:show], order[::-1][:show][::-1]])
        images = read_rows(pool_path, "image", picked)
        gap = np.full((images.shape[1], 4, 3), 255, np.uint8)
        tiles = [images[i] for i in range(show)] + [gap] + [images[i] for i in range(show, len(images))]
        rows.append(np.concatenate(tiles, axis=1))
    if not rows:
        return np.zeros((8, 8, 3), np.uint8)
    width = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, 2), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows]
    grid = np.concatenate(rows, axis=0)
    return grid.repeat(scale, axis=0).repeat(scale, axis=1)
