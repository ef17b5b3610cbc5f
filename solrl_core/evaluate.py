"""Held-out evaluation of a checkpoint: fixed prompts and seeds, EMA weights merged, full precision, every reward.

The evaluation seeds live in their own range (they never coincide with training candidates), and the prompts are
the first `eval.num_prompts` of the evaluation set, so every evaluation of a run — and of other runs with the same
eval config — sees the same inputs. Artifact: `<run>/eval/step_NNNN/` with `pool.zarr` (the samples),
`samples.png` (a grid, one row per prompt) and `metrics.json`.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from solrl_core.run import commit
from solrl_core.config.schema import RunConfig
from solrl_core.eval_metrics import evaluation_metrics, seed_blocks
from solrl_core.grids import Tile, labelled_grid, rank_captions
from solrl_core.run.integrity import FILES_KEY, inventory, sealed, verify_checkpoint
from solrl_core.prompts import eval_prompt_set, eval_sources
from solrl_core.rl.policy import EmaWeights
from solrl_core.run.rundir import start_attempt, write_json_atomic
from solrl_core.run.lineage import lineage
from solrl_core.run.staleness import eval_dependencies, eval_stale_cause, input_ids
from solrl_core.models.backbones.cache import load_backbone
from solrl_core.stages.checkpoints import (EMA_FILE, attach_policy, full_weights, has_ema, initial_checkpoint, is_full,
                                          load_adapters)
from solrl_core.stages.context import StageContext
from solrl_core.stages.transformer_copies import lora_weights, merged_transformer
from solrl_core.stages.pool_scoring import PoolScoring, pool_scoring
from solrl_core.stages.sampling import PoolSampling
from solrl_core.stages.shards import sample_pool, split_or_whole
from solrl_core.run.storage import load_tensors, save_image

EVAL_SEED_BASE = 2_000_000_000


def eval_inputs(cfg: RunConfig) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(prompts, prompt_index per sample, seed per sample) of the evaluation."""
    prompts = eval_prompt_set(cfg)
    n = cfg.eval.seeds_per_prompt
    prompt_index = np.repeat(np.arange(len(prompts)), n)
    seeds = EVAL_SEED_BASE + np.arange(len(prompt_index))
    return prompts, prompt_index, seeds


def policy_transformer(cfg: RunConfig, checkpoint: Path, use_ema: bool = True) -> tuple[torch.nn.Module, bool]:
    """W0 + θ (or its EMA when the checkpoint has one) merged into a full-precision transformer that shares every
    other weight with the loaded W0 (`merged_transformer`)."""
    backbone = load_backbone(cfg)
    if is_full(cfg):  # θ's or the EMA's every weight; the initial checkpoint's θ is W0
        ema_used = use_ema and has_ema(checkpoint)
        return merged_transformer(backbone, full_weights(backbone, checkpoint, "ema" if ema_used else "default")), \
            ema_used
    policy = attach_policy(cfg, backbone)
    load_adapters(policy, checkpoint)
    ema_used = use_ema and (checkpoint / EMA_FILE).is_file()
    if ema_used:
        ema = EmaWeights(policy, max_decay=cfg.train.ema_max_decay)
        ema.load_state_dict(load_tensors(checkpoint / EMA_FILE))
        with ema.swapped_in(policy):
            merged = policy.merged_weights("default")
    else:
        merged = policy.merged_weights("default")
    del policy  # its module tree (W0 itself is shared with the cached backbone)
    return merged_transformer(backbone, lora_weights(merged)), ema_used


def sample_grid(images: np.ndarray, reward: np.ndarray, prompt_index: np.ndarray, prompts: list[str]) -> np.ndarray:
    """The evaluation samples, one row per prompt (its text above), each image captioned with its reward and its
    rank among the prompt's samples (best / #r / worst)."""
    rows = []
    for p in sorted(set(prompt_index.tolist())):
        members = np.flatnonzero(prompt_index == p)
        tiles = [Tile(images[i], c) for i, c in zip(members, rank_captions(reward[members]))]
        rows.append((prompts[p] if p < len(prompts) else f"prompt {p}", tiles))
    return labelled_grid(rows)


def eval_dir(run, step: int) -> Path:
    """Where the evaluation after `step` updates lives (step 0 = the initial policy)."""
    return run.eval_dir(step)


def _partial(ctx: StageContext) -> Path:
    return ctx.run.eval_partial_dir(ctx.iteration)


def _checkpoint(ctx: StageContext) -> Path:
    step = ctx.iteration
    return initial_checkpoint(StageContext(ctx.run, ctx.cfg, 0)) if step == 0 else ctx.run.checkpoint_dir(step - 1)


def _policy(ctx: StageContext, backbone) -> torch.nn.Module:
    return policy_transformer(ctx.cfg, _checkpoint(ctx))[0]


def sampling(ctx: StageContext) -> PoolSampling:
    """The evaluation samples of the policy after `ctx.iteration` updates (the context's iteration is the step)."""
    cfg = ctx.cfg
    prompts, prompt_index, seeds = eval_inputs(cfg)
    return PoolSampling(
        path=_partial(ctx) / "pool.zarr",
        prompts=prompts,
        prompt_index=prompt_index,
        seeds=seeds,
        steps=cfg.eval.steps,
        batch_size=cfg.eval.batch_size,
        keep_latents=False,
        attrs={"step": ctx.iteration, "evaluation": True},
        desc=f"evaluate step {ctx.iteration}",
        model=_policy,
        guidance=cfg.guidance.eval,
        sde=False,  # the ODE, whatever the objective's rollouts (flow_grpo evaluates with noise level 0 too)
        sources=eval_sources(cfg),
    )


def scoring(ctx: StageContext) -> PoolScoring:
    return pool_scoring(ctx, _partial(ctx) / "pool.zarr", f"score evaluation step {ctx.iteration}",
                        ctx.cfg.evaluation_rewards())


def run_eval(run, cfg: RunConfig, step: int, progress: bool = False) -> dict:
    """Evaluate the policy after `step` iterations once; later calls return the stored metrics, unless the checkpoint
    was computed again since (the evaluation is stale: solrl_core/run/staleness.py), which evaluates it again.

    Samples (`eval.steps`, `guidance.eval`, the run's solver) into `pool.zarr` and scores it with `eval.rewards`,
    each split over the devices like the sampling and score stages; `metrics` are the rewards' means. The previous
    evaluation stays complete until the new one is (RunDir.commit_evaluation)."""
    from PIL import Image

    if commit.pending(run.eval_pending_path(step)) is not None:
        run.finish_eval_commit(step)  # a commit a stopped process left under way
    done = run.evaluation(step)
    if done is not None and eval_stale_cause(run, step, done) is None:
        return done
    started = time.perf_counter()
    ctx = StageContext(run, cfg, step, progress)
    ema_used = has_ema(_checkpoint(ctx))  # also writes the initial adapters before any shard starts
    verify_checkpoint(run, step - 1)
    partial = _partial(ctx)
    inputs = input_ids(run, eval_dependencies(step))
    start_attempt(run.eval_pending_path(step), partial, inputs, resume=True, replacing=done is not None)
    partial.mkdir(parents=True, exist_ok=True)  # an interrupted evaluation resumes its pool (of the same inputs)
    writer, sample_shards = sample_pool(ctx, sampling, overlap=False)
    (total, per), score_shards = split_or_whole(ctx, scoring)
    pool = writer.group
    metrics = evaluation_metrics(total, per, cfg.eval.gold)
    blocks = seed_blocks(total, per, cfg.eval.gold, cfg.eval.seeds_per_prompt)
    images = np.asarray(pool["image"][...])
    grid = sample_grid(images, np.asarray(total), np.asarray(pool["prompt_index"][...]), list(pool.attrs["prompts"]))
    save_image(Image.fromarray(grid), partial / "samples.png")
    summary = {"step": step, "metrics": metrics, "seed_blocks": blocks, "ema": ema_used, "samples": int(len(images)),
               "prompts": list(pool.attrs["prompts"]), "sampler": pool.attrs["sampler"], "guidance": cfg.guidance.eval,
               "shards": sample_shards, "score_shards": score_shards, "seconds": round(time.perf_counter() - started, 3),
               **lineage(inputs=inputs)}
    write_json_atomic(partial / "metrics.json", sealed({**summary, FILES_KEY: inventory(partial)}))  # edits refused
    return run.commit_evaluation(step)
