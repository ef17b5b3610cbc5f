"""regenerate: the selected seeds again, same initial noise, full-precision copy, full step budget.

Families that train on the explore samples themselves (diffusionnft, naive_scaling, naive_quant) set
`regenerate.enabled: false`; the stage then gathers the selected candidates from the pool instead, so the update
always reads one kind of artifact. With `orchestration.workers.regenerate` > 1 the samples are drawn in shards by
several processes at once (solrl_core/stages/shards.py), with the same result as one process.
"""

from __future__ import annotations

import numpy as np

from solrl_core.pool import read_rows, read_table, write_table
from solrl_core.stages.context import StageContext, load_backbone, load_merged_transformer
from solrl_core.stages.pool_scoring import scoring_while_sampling
from solrl_core.stages.sampling import sample_into_pool
from solrl_core.stages.shards import ShardedSampling, sample_sharded, workers_for


def _selected(ctx: StageContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """(candidate_index, prompt_index, seed) of the selected candidates, and the explore pool's attributes."""
    chosen = read_table(ctx.artifact("select", "selection.zarr"), ["candidate_index"])[0]["candidate_index"]
    pool_cols, pool_attrs = read_table(ctx.artifact("explore", "pool.zarr"), ["prompt_index", "seed"])
    return chosen, pool_cols["prompt_index"][chosen], pool_cols["seed"][chosen], pool_attrs


def _pool(ctx: StageContext) -> dict:
    """The regenerated samples' rows and settings (sample_into_pool's arguments), the same in every process."""
    cfg = ctx.cfg
    chosen, prompt_index, seeds, pool_attrs = _selected(ctx)
    return {
        "path": ctx.run.partial_dir(ctx.iteration, "regenerate") / "samples.zarr",
        "prompts": list(pool_attrs["prompts"]),
        "prompt_index": prompt_index,
        "seeds": seeds,
        "steps": cfg.regenerate.steps,
        "batch_size": cfg.regenerate.batch_size,
        "keep_latents": True,
        "attrs": {"precision": "fp32", "iteration": ctx.iteration, "regenerated": True},
        "desc": f"regenerate it{ctx.iteration} (fp32, {cfg.regenerate.steps} steps)",
        "extra_columns": {"candidate_index": chosen.astype(np.int64)},
    }


SHARDING = ShardedSampling(pool=_pool, model=load_merged_transformer)


def run_regenerate(ctx: StageContext) -> dict:
    cfg = ctx.cfg
    pool_path = ctx.artifact("explore", "pool.zarr")
    chosen, prompt_index, seeds, pool_attrs = _selected(ctx)
    workers, reports = workers_for(ctx, "regenerate"), []
    with ctx.run.stage_output(ctx.iteration, "regenerate", resume_partial=cfg.regenerate.enabled) as out:
        if cfg.regenerate.enabled:
            args = _pool(ctx)  # args["path"] lies in `out`
            row_prompts = [args["prompts"][i] for i in prompt_index]
            with scoring_while_sampling(ctx, args["path"], row_prompts, seeds,
                                        overlap=None if workers == 1 else False) as on_commit:
                if workers == 1:
                    backbone = load_backbone(cfg)
                    sample_into_pool(backbone=backbone, transformer=load_merged_transformer(ctx, backbone),
                                     progress=ctx.progress, ctx=ctx, on_commit=on_commit, **args)
                else:
                    reports = sample_sharded(ctx, "regenerate", workers)[1]
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
    return {"samples": int(len(chosen)), "regenerated": cfg.regenerate.enabled, "workers": workers,
            "shard_processes": len({r["pid"] for r in reports}) or 1}
