"""explore: N seeds per prompt through the explore copy (4-bit or full precision), into the candidate pool.

The copy is W0 + θ_old (the previous checkpoint's), quantized, built in each process that samples exactly as the
quantize stage built it for its report; with ``quant.lora_branch`` it is W0 quantized with θ_old's LoRA beside it in
high precision (solrl_core/stages/quantize.py). With `explore.sibling` another model's weights take W0's place, and
its schedule samples the pool.

With several devices (`orchestration.devices`) the pool is sampled in shards of whole batches, one per device
(solrl_core/stages/shards.py); the pool is the same as one device makes.
"""

from __future__ import annotations

import numpy as np

from solrl_core.stages.context import StageContext
from solrl_core.stages.draws import candidate_seed, iteration_prompts, iteration_sources
from solrl_core.stages.explore_setting import explore_setting
from solrl_core.stages.quantize import explore_sampler, explore_source
from solrl_core.stages.sampling import PoolSampling
from solrl_core.rl.objectives import objective_for
from solrl_core.stages.shards import sample_pool


def sampling(ctx: StageContext) -> PoolSampling:
    """The explore pool's rows and settings, the same in every process."""
    cfg = ctx.cfg
    setting = explore_setting(ctx)
    prompts = iteration_prompts(cfg, ctx.iteration)
    n = cfg.explore.seeds_per_prompt
    return PoolSampling(
        path=ctx.run.partial_dir(ctx.iteration, "explore") / "pool.zarr",
        prompts=prompts,
        prompt_index=np.repeat(np.arange(len(prompts)), n),
        seeds=np.array([candidate_seed(cfg, ctx.iteration, p, c) for p in range(len(prompts)) for c in range(n)]),
        steps=setting.steps,
        batch_size=cfg.explore.batch_size,
        keep_latents=cfg.explore.keep_latents or not cfg.regenerate.enabled,
        # without a regenerate stage the update trains on these samples: the objective's trajectories with them
        keep_trajectory=objective_for(cfg).trajectory and not cfg.regenerate.enabled,
        attrs={"precision": setting.precision, "iteration": ctx.iteration, **setting.record()},
        desc=f"explore it{ctx.iteration} ({setting.label()})",
        model=explore_sampler,
        sampling_backbone=explore_source,
        sources=iteration_sources(cfg, ctx.iteration),
        decode=setting.decode,
    )


def run_explore(ctx: StageContext) -> dict:
    with ctx.run.stage_output(ctx.iteration, "explore", resume_partial=True):  # the pool lies in it
        writer, shards = sample_pool(ctx, sampling)
        attrs = dict(writer.group.attrs)
    return {"candidates": writer.committed, "prompts": len(attrs["prompts"]), "precision": attrs["precision"],
            "steps": int(attrs["steps"]), "shards": shards}
