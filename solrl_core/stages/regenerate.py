"""regenerate: the selected seeds again, same initial noise, full precision, full step budget.

The model is θ_old as a LoRA branch on the shared base weights (solrl_core/stages/old_policy.py): no merged copy.

Families that train on the explore samples themselves (baseline, naive_scaling, naive_quant) set
`regenerate.enabled: false`; the stage then gathers the selected candidates from the pool instead, so the update
always reads one kind of artifact. With several devices (`orchestration.devices`) the samples are drawn in shards
of whole batches, one per device (solrl_core/stages/shards.py), with the same result as one device.
"""

from __future__ import annotations

import numpy as np

from solrl_core.edit_sources import pool_sources
from solrl_core.rl.objectives import objective_for
from solrl_core.run.pool import column_names, read_rows, read_table, write_table
from solrl_core.stages.context import StageContext
from solrl_core.stages.old_policy import old_policy_transformer
from solrl_core.stages.sampling import TRAJECTORY_COLUMNS, PoolSampling
from solrl_core.stages.shards import sample_pool


def _selected(ctx: StageContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """(candidate_index, prompt_index, seed) of the selected candidates, and the explore pool's attributes."""
    chosen = read_table(ctx.artifact("select", "selection.zarr"), ["candidate_index"])[0]["candidate_index"]
    pool_cols, pool_attrs = read_table(ctx.artifact("explore", "pool.zarr"), ["prompt_index", "seed"])
    return chosen, pool_cols["prompt_index"][chosen], pool_cols["seed"][chosen], pool_attrs


def sampling(ctx: StageContext) -> PoolSampling:
    """The regenerated samples' rows and settings, the same in every process."""
    cfg = ctx.cfg
    chosen, prompt_index, seeds, pool_attrs = _selected(ctx)
    return PoolSampling(
        path=ctx.run.partial_dir(ctx.iteration, "regenerate") / "samples.zarr",
        prompts=list(pool_attrs["prompts"]),
        prompt_index=prompt_index,
        seeds=seeds,
        steps=cfg.regenerate.steps,
        batch_size=cfg.regenerate.batch_size,
        keep_latents=True,
        keep_trajectory=objective_for(cfg).trajectory,
        attrs={"precision": "fp32", "iteration": ctx.iteration, "regenerated": True},
        desc=f"regenerate it{ctx.iteration} (fp32, {cfg.regenerate.steps} steps)",
        model=old_policy_transformer,
        extra_columns={"candidate_index": chosen.astype(np.int64)},
        sources=pool_sources(pool_attrs),
    )


def run_regenerate(ctx: StageContext) -> dict:
    cfg = ctx.cfg
    shards: list[dict] = []
    with ctx.run.stage_output(ctx.iteration, "regenerate", resume_partial=cfg.regenerate.enabled) as out:
        if cfg.regenerate.enabled:
            shards = sample_pool(ctx, sampling)[1]  # the samples lie in `out`
            chosen = read_table(out / "samples.zarr", ["candidate_index"])[0]["candidate_index"]
        else:
            pool_path = ctx.artifact("explore", "pool.zarr")
            chosen, prompt_index, seeds, pool_attrs = _selected(ctx)
            write_table(
                out / "samples.zarr",
                {
                    "candidate_index": chosen.astype(np.int64),
                    "prompt_index": prompt_index,
                    "seed": seeds,
                    "image": read_rows(pool_path, "image", chosen),
                    "latent": read_rows(pool_path, "latent", chosen),
                    **{name: read_rows(pool_path, name, chosen) for name in TRAJECTORY_COLUMNS
                       if name in column_names(pool_path)},
                },
                attrs={**pool_attrs, "regenerated": False, "committed": len(chosen), "n_rows": len(chosen)},
            )
    return {"samples": int(len(chosen)), "regenerated": cfg.regenerate.enabled, "shards": shards}
