"""A readable summary of one iteration's candidate pool (what `solrl inspect` prints)."""

from __future__ import annotations

import numpy as np

from solrl_core.errors import MissingInputError
from solrl_core.pool import read_table
from solrl_core.rundir import RunDir


def pool_summary(run: RunDir, iteration: int) -> dict:
    if not run.is_complete(iteration, "explore"):
        raise MissingInputError(f"iteration {iteration} of {run.root} has no complete explore pool yet")
    cols, attrs = read_table(run.stage_dir(iteration, "explore") / "pool.zarr", ["prompt_index", "seed"])
    n = len(cols["seed"])
    proxy = np.full(n, np.nan)
    if run.is_complete(iteration, "score_explore"):
        proxy = read_table(run.stage_dir(iteration, "score_explore") / "rewards.zarr", ["reward"])[0]["reward"]
    chosen = np.zeros(0, dtype=np.int64)
    if run.is_complete(iteration, "select"):
        sel = read_table(run.stage_dir(iteration, "select") / "selection.zarr", ["candidate_index"])[0]
        chosen = sel["candidate_index"]
    final = {}
    if run.is_complete(iteration, "score_final"):
        r = read_table(run.stage_dir(iteration, "score_final") / "rewards.zarr", ["reward"])[0]["reward"]
        final = dict(zip(chosen.tolist(), r.tolist()))
    per_prompt = []
    for p, prompt in enumerate(attrs["prompts"]):
        members = np.flatnonzero(cols["prompt_index"] == p)
        picked = [int(i) for i in chosen if cols["prompt_index"][i] == p]
        picked.sort(key=lambda i: -proxy[i])
        per_prompt.append(
            {
                "prompt_index": p,
                "prompt": prompt,
                "n": int(len(members)),
                "proxy_mean": float(np.mean(proxy[members])),
                "proxy_min": float(np.min(proxy[members])),
                "proxy_max": float(np.max(proxy[members])),
                "selected": [
                    {"candidate": i, "seed": int(cols["seed"][i]), "proxy": float(proxy[i]), "final": final.get(i)}
                    for i in picked
                ],
            }
        )
    quantize = {}
    if run.is_complete(iteration, "quantize"):
        quantize = run.manifest(iteration, "quantize")["summary"]
    return {
        "iteration": iteration,
        "quantize": quantize,
        "candidates": n,
        "prompts": len(attrs["prompts"]),
        "selected": int(len(chosen)),
        "explore_precision": attrs.get("precision"),
        "explore_steps": attrs.get("steps"),
        "per_prompt": per_prompt,
    }
