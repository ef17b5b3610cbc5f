"""regenerate: the selected seeds again, same initial noise, full-precision copy, full step budget.

Families that train on the explore samples themselves (diffusionnft, naive_scaling, naive_quant) set
`regenerate.enabled: false`; the stage then gathers the selected candidates from the pool instead, so the update
always reads one kind of artifact.
"""

from __future__ import annotations

import numpy as np

from solrl_core.pool import read_rows, read_table, write_table
from solrl_core.stages.context import StageContext, load_backbone, load_merged_transformer
from solrl_core.stages.pool_scoring import scoring_while_sampling
from solrl_core.stages.sampling import sample_into_pool


def run_regenerate(ctx: StageContext) -> dict:
    cfg = ctx.cfg
    pool_path = ctx.artifact("explore", "pool.zarr")
    chosen = read_table(ctx.artifact("select", "selection.zarr"), ["candidate_index"])[0]["candidate_index"]
    pool_cols, pool_attrs = read_table(pool_path, ["prompt_index", "seed"])
    prompt_index, seeds = pool_cols["prompt_index"][chosen], pool_cols["seed"][chosen]
    with ctx.run.stage_output(ctx.iteration, "regenerate", resume_partial=cfg.regenerate.enabled) as out:
        if cfg.regenerate.enabled:
            backbone = load_backbone(cfg)
            prompts = list(pool_attrs["prompts"])
            row_prompts = [prompts[i] for i in prompt_index]
            with scoring_while_sampling(ctx, out / "samples.zarr", row_prompts, seeds) as on_commit:
                sample_into_pool(
                    out / "samples.zarr",
                    backbone,
                    load_merged_transformer(ctx, backbone),
                    prompts,
                    prompt_index,
                    seeds,
                    steps=cfg.regenerate.steps,
                    batch_size=cfg.regenerate.batch_size,
                    keep_latents=True,
                    attrs={"precision": "fp32", "iteration": ctx.iteration, "regenerated": True},
                    progress=ctx.progress,
                    desc=f"regenerate it{ctx.iteration} (fp32, {cfg.regenerate.steps} steps)",
                    ctx=ctx,
                    extra_columns={"candidate_index": chosen.astype(np.int64)},
                    on_commit=on_commit,
                )
        else:
            write_table(
                out / "samples.zarr",
                {
                    "candidate_index": chosen.astype(np.int64),
                    "prompt_index": prompt_index,
                    "seed": seeds,
                    "image": read_rows(pool_path, "image", chosen),
                    "latent": read_rows(pool_path, "latent", chosen),
                },
                attrs={**pool_attrs, "regenerated": False, "committed": len(chosen), "n_rows": len(chosen)},
            )
    return {"samples": int(len(chosen)), "regenerated": cfg.regenerate.enabled}

