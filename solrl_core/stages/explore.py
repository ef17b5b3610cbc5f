"""explore: N seeds per prompt through the explore copy (4-bit or full precision), into the candidate pool."""

from __future__ import annotations

import numpy as np
from safetensors.torch import load_file

from solrl_core.stages.context import StageContext, candidate_seed, iteration_prompts, load_backbone
from solrl_core.stages.pool_scoring import scoring_while_sampling
from solrl_core.stages.quantize import build_explore_copy
from solrl_core.stages.sampling import sample_into_pool


def run_explore(ctx: StageContext) -> dict:
    cfg = ctx.cfg
    backbone = load_backbone(cfg)
    merged = load_file(str(ctx.artifact("quantize", "merged_old.safetensors")))
    transformer, _, setting = build_explore_copy(ctx, backbone, merged)
    prompts = iteration_prompts(cfg, ctx.iteration)
    n = cfg.explore.seeds_per_prompt
    prompt_index = np.repeat(np.arange(len(prompts)), n)
    seeds = np.array([candidate_seed(cfg, ctx.iteration, p, c) for p in range(len(prompts)) for c in range(n)])
    with (
        ctx.run.stage_output(ctx.iteration, "explore", resume_partial=True) as out,
        scoring_while_sampling(ctx, out / "pool.zarr", [prompts[i] for i in prompt_index], seeds) as on_commit,
    ):
        writer = sample_into_pool(
            out / "pool.zarr",
            backbone,
            transformer,
            prompts,
            prompt_index,
            seeds,
            steps=setting.steps,
            batch_size=cfg.explore.batch_size,
            keep_latents=cfg.explore.keep_latents or not cfg.regenerate.enabled,
            attrs={"precision": setting.precision, "iteration": ctx.iteration},
            progress=ctx.progress,
            desc=f"explore it{ctx.iteration} ({setting.precision}, {setting.steps} steps)",
            ctx=ctx,
            on_commit=on_commit,
        )
    return {"candidates": writer.committed, "prompts": len(prompts), "precision": setting.precision,
            "steps": setting.steps}
