"""select: per prompt, the K most contrastive seeds of the explore pool (or another configured rule)."""

from __future__ import annotations

import numpy as np

from solrl_core.run.pool import read_table, write_table
from solrl_core.rl.selection import select_candidates
from solrl_core.stages.context import StageContext
from solrl_core.stages.draws import PURPOSE_SELECT
from solrl_core.seeds import derived_generator


def run_select(ctx: StageContext) -> dict:
    rewards, _ = read_table(ctx.artifact("score_explore", "rewards.zarr"), ["reward"])
    pool, _ = read_table(ctx.artifact("explore", "pool.zarr"), ["prompt_index", "seed"])
    mode, k = ctx.cfg.select.mode, ctx.cfg.select.k
    chosen = select_candidates(
        rewards["reward"],
        pool["prompt_index"],
        k=k,
        mode=mode,
        generator=derived_generator(ctx.cfg.seed, ctx.iteration, PURPOSE_SELECT),
    )
    selected = np.zeros(len(rewards["reward"]), dtype=bool)
    selected[chosen] = True
    with ctx.run.stage_output(ctx.iteration, "select") as out:
        write_table(
            out / "selection.zarr",
            {"candidate_index": chosen.astype(np.int64), "selected": selected},
            attrs={"mode": mode, "k": k},
        )
    chosen_r = rewards["reward"][chosen]
    return {"selected": int(len(chosen)), "mode": mode, "selected_std": float(chosen_r.std())}
