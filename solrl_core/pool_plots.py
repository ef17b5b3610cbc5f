"""Pictures people look at: best/worst candidate grids of a pool (a pool of videos: frame strips, and animated grids),
and the proxy-against-final reward scatter plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from solrl_core.grids import MIN_TILE, Tile, animated_grid, labelled_grid
from solrl_core.edit_sources import SOURCE_ARRAY
from solrl_core.run.pool import column_names, read_rows, read_table


def _best_worst_tiles(pool_path, members: np.ndarray, reward: np.ndarray, n_show: int) -> list[Tile | None]:
    """One prompt's `n_show` best candidates (best first), a gap, its `n_show` worst (worst last), each captioned
    with its rank and reward."""
    order = members[np.argsort(-reward[members], kind="stable")]
    show = max(1, min(n_show, len(order) // 2))
    picked = np.concatenate([order[:show], order[::-1][:show][::-1]])
    images = read_rows(pool_path, "image", picked)
    labels = [f"best {i + 1}" for i in range(show)] + [f"worst {show - i}" for i in range(show)]
    tiles = [Tile(im, f"{label} · {reward[row]:.3f}") for im, label, row in zip(images, labels, picked)]
    return [*tiles[:show], None, *tiles[show:]]


def _source_tiles(pool_path, prompt: int) -> list[Tile | None]:
    """An edit prompt's source image(s) (the pool's `source_image`), then a gap; nothing for a text-to-image pool."""
    if SOURCE_ARRAY not in column_names(pool_path):
        return []
    sources = read_rows(pool_path, SOURCE_ARRAY, np.array([prompt]))[0]
    return [*(Tile(image, "source" if len(sources) == 1 else f"source {i + 1}") for i, image in enumerate(sources)
              if image.any()), None]


def _prompt_rows(pool_path, reward: np.ndarray, n_show: int, n_prompts: int | None) -> dict[int, tuple]:
    """Per prompt of the pool: its text, and its tiles (an edit's source first, then its best and worst)."""
    table, attrs = read_table(pool_path, ["prompt_index"])
    prompt_index, prompts = table["prompt_index"], list(attrs.get("prompts", []))
    chosen = sorted(set(prompt_index.tolist()))[:n_prompts]
    return {int(p): (prompts[p] if p < len(prompts) else f"prompt {p}",
                     [*_source_tiles(pool_path, p),
                      *_best_worst_tiles(pool_path, np.flatnonzero(prompt_index == p), reward, n_show)])
            for p in chosen}


def best_worst_grid(pool_path, reward: np.ndarray, n_prompts: int, n_show: int = 4, tile: int = MIN_TILE) -> np.ndarray:
    """Rows: for each of the first `n_prompts` prompts (its text above the row; an edit's instruction, after its
    source image), its `n_show` best then `n_show` worst candidates by reward, each captioned with its rank and
    reward. Returns a uint8 (H, W, 3) image."""
    return labelled_grid(list(_prompt_rows(pool_path, reward, n_show, n_prompts).values()), tile)


def top_bottom_grids(pool_path, reward: np.ndarray, k: int, tile: int = 128) -> dict[int, np.ndarray]:
    """For every prompt of the pool: one labelled image (the prompt above) with its top-`k` candidates by `reward`
    (best first), a gap, and its bottom-`k` (worst last), each `tile` pixels on the longer side.
    {prompt_index: uint8 (H, W, 3)}."""
    return {p: labelled_grid([row], tile) for p, row in _prompt_rows(pool_path, reward, k, None).items()}


def top_bottom_animations(pool_path, reward: np.ndarray, k: int, tile: int = 128) -> dict[int, list[np.ndarray]]:
    """`top_bottom_grids` of a pool of videos, one grid per frame (the frames of an animated preview, e.g.
    `grids.save_gif`); {} for a pool of images."""
    if read_rows(pool_path, "image", np.arange(1)).ndim != 5:
        return {}
    return {p: animated_grid([row], tile) for p, row in _prompt_rows(pool_path, reward, k, None).items()}


def proxy_final_scatter(proxy, final, prompt_index, path: str | Path, prompts: list[str] | None = None,
                        title: str = "") -> dict[str, float]:
    """Scatter plot (PNG at `path`) of the final reward against the proxy reward of the same seeds, one colour per
    prompt, with the diagonal; the title gives the ranking fidelity. Rows with a NaN (no final reward) are left
    out. Returns the fidelity figures (solrl_core.rl.fidelity.ranking_fidelity) of the plotted points."""
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure registry is touched

    from solrl_core.rl.fidelity import ranking_fidelity

    proxy, final = np.asarray(proxy, np.float64), np.asarray(final, np.float64)
    prompt_index = np.asarray(prompt_index)
    keep = np.isfinite(proxy) & np.isfinite(final)
    proxy, final, prompt_index = proxy[keep], final[keep], prompt_index[keep]
    fidelity = ranking_fidelity(proxy, final, prompt_index)

    fig = Figure(figsize=(5.5, 5), dpi=110)
    ax = fig.subplots()
    groups = sorted(set(prompt_index.tolist()))
    for p in groups:
        at = prompt_index == p
        label = None
        if len(groups) <= 10:
            text = prompts[p] if prompts is not None and p < len(prompts) else f"prompt {p}"
            label = text if len(text) <= 40 else text[:37] + "..."
        ax.scatter(proxy[at], final[at], s=22, alpha=0.8, label=label)
    if len(proxy):
        lo, hi = float(min(proxy.min(), final.min())), float(max(proxy.max(), final.max()))
        pad = 0.05 * (hi - lo or 1.0)
        ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="grey", lw=0.8, ls="--", label="final = proxy")
    ax.set_xlabel("proxy reward (explore copy)")
    ax.set_ylabel("final reward (training sample)")

    def fmt(x):
        return "n/a" if not np.isfinite(x) else f"{x:.2f}"

    figures = (f"Spearman {fmt(fidelity['spearman'])} (within prompt {fmt(fidelity['spearman_within_prompt'])}), "
               f"Kendall {fmt(fidelity['kendall'])}, n={len(proxy)}")
    ax.set_title(f"{title}\n{figures}" if title else figures, fontsize=9)
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(str(path), format="png")
    return fidelity
