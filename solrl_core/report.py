"""Pictures people look at: best/worst candidate grids of a pool, and the proxy-against-final reward scatter plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from solrl_core.pool import read_rows, read_table


def _fit_tile(images: np.ndarray, tile: int | None, scale: int) -> np.ndarray:
    """Upscale by `scale` (nearest neighbour), or, with `tile`, resize every image so its longer side is `tile`
    pixels (nearest neighbour when enlarging, so small images stay crisp; Lanczos when shrinking)."""
    if tile is None:
        return images.repeat(scale, axis=1).repeat(scale, axis=2)
    from PIL import Image

    h, w = images.shape[1:3]
    size = (max(1, round(w * tile / max(h, w))), max(1, round(h * tile / max(h, w))))
    if size == (w, h):
        return images
    method = Image.Resampling.NEAREST if size[0] >= w else Image.Resampling.LANCZOS
    return np.stack([np.asarray(Image.fromarray(im).resize(size, method)) for im in images])


def _best_worst_row(pool_path, members: np.ndarray, reward: np.ndarray, n_show: int, tile: int | None,
                    scale: int) -> np.ndarray:
    """One prompt's `n_show` best candidates (best first), a white gap, its `n_show` worst (worst last)."""
    order = members[np.argsort(-reward[members], kind="stable")]
    show = max(1, min(n_show, len(order) // 2))
    picked = np.concatenate([order[:show], order[::-1][:show][::-1]])
    images = _fit_tile(read_rows(pool_path, "image", picked), tile, scale)
    gap = np.full((images.shape[1], 4 * (1 if tile else scale), 3), 255, np.uint8)
    return np.concatenate([*images[:show], gap, *images[show:]], axis=1)


def _stack_rows(rows: list[np.ndarray]) -> np.ndarray:
    width = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, 2), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows]
    return np.concatenate(rows, axis=0)


def best_worst_grid(pool_path, reward: np.ndarray, n_prompts: int, n_show: int = 4, scale: int = 3) -> np.ndarray:
    """Rows: for each of the first `n_prompts` prompts, its `n_show` best then `n_show` worst candidates (by reward),
    separated by a gap. Returns a uint8 (H, W, 3) image, upscaled `scale`× with nearest neighbour."""
    prompt_index = read_table(pool_path, ["prompt_index"])[0]["prompt_index"]
    rows = [_best_worst_row(pool_path, np.flatnonzero(prompt_index == p), reward, n_show, None, 1)
            for p in sorted(set(prompt_index.tolist()))[:n_prompts]]
    if not rows:
        return np.zeros((8, 8, 3), np.uint8)
    return _stack_rows(rows).repeat(scale, axis=0).repeat(scale, axis=1)


def top_bottom_grids(pool_path, reward: np.ndarray, k: int, tile: int = 128) -> dict[int, np.ndarray]:
    """For every prompt of the pool: one image with its top-`k` candidates by `reward` (best first), a gap, and its
    bottom-`k` (worst last), each resized to `tile` pixels on the longer side. {prompt_index: uint8 (H, W, 3)}."""
    prompt_index = read_table(pool_path, ["prompt_index"])[0]["prompt_index"]
    return {int(p): _best_worst_row(pool_path, np.flatnonzero(prompt_index == p), reward, k, tile, 1)
            for p in sorted(set(prompt_index.tolist()))}


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
