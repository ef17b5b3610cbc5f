"""explore: N seeds per prompt through the explore copy (4-bit or full precision), into the candidate pool.

With `orchestration.workers.explore` > 1 the pool is sampled in shards by several processes at once
(solrl_core/stages/shards.py); the pool is the same as one process makes.
"""

from __future__ import annotations

import numpy as np

from solrl_core.stages.context import StageContext, candidate_seed, explore_setting, iteration_prompts, load_backbone
from solrl_core.stages.pool_scoring import scoring_while_sampling
from solrl_core.stages.quantize import build_explore_copy
from solrl_core.stages.sampling import sample_into_pool
from solrl_core.stages.shards import ShardedSampling, sample_sharded, workers_for
from solrl_core.storage import load_tensors


def _pool(ctx: StageContext) -> dict:
    """The explore pool's rows and settings (sample_into_pool's arguments), the same in every process."""
    cfg = ctx.cfg
    setting = explore_setting(ctx)
    prompts = iteration_prompts(cfg, ctx.iteration)
    n = cfg.explore.seeds_per_prompt
    return {
        "path": ctx.run.partial_dir(ctx.iteration, "explore") / "pool.zarr",
        "prompts": prompts,
        "prompt_index": np.repeat(np.arange(len(prompts)), n),
        "seeds": np.array([candidate_seed(cfg, ctx.iteration, p, c) for p in range(len(prompts)) for c in range(n)]),
        "steps": setting.steps,
        "batch_size": cfg.explore.batch_size,
        "keep_latents": cfg.explore.keep_latents or not cfg.regenerate.enabled,
        "attrs": {"precision": setting.precision, "iteration": ctx.iteration},
        "desc": f"explore it{ctx.iteration} ({setting.precision}, {setting.steps} steps)",
    }


def _model(ctx: StageContext, backbone):
    merged = load_tensors(ctx.artifact("quantize", "merged_old.safetensors"))
    return build_explore_copy(ctx, backbone, merged)[0]


SHARDING = ShardedSampling(pool=_pool, model=_model)


def run_explore(ctx: StageContext) -> dict:
    args = _pool(ctx)
    workers, reports = workers_for(ctx, "explore"), []
    with ctx.run.stage_output(ctx.iteration, "explore", resume_partial=True):  # args["path"] lies in it
        row_prompts = [args["prompts"][i] for i in args["prompt_index"]]
        with scoring_while_sampling(ctx, args["path"], row_prompts, args["seeds"],
                                    overlap=None if workers == 1 else False) as on_commit:
            if workers == 1:
                backbone = load_backbone(ctx.cfg)
                writer = sample_into_pool(backbone=backbone, transformer=_model(ctx, backbone),
                                          progress=ctx.progress, ctx=ctx, on_commit=on_commit, **args)
            else:
                writer, reports = sample_sharded(ctx, "explore", workers)
    return {"candidates": writer.committed, "prompts": len(args["prompts"]), "precision": args["attrs"]["precision"],
            "steps": args["steps"], "workers": workers, "shard_processes": len({r["pid"] for r in reports}) or 1}
