"""Held-out evaluation of a checkpoint: fixed prompts and seeds, EMA weights merged, full precision, every reward.

The evaluation seeds live in their own range (they never coincide with training candidates), and the prompts are
the first `eval.num_prompts` of the evaluation set, so every evaluation of a run — and of other runs with the same
eval config — sees the same inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from solrl_core.config import RunConfig
from solrl_core.prompts import eval_prompt_set
from solrl_core.rewards.registry import score_images
from solrl_core.rl.policy import EmaWeights
from solrl_core.sampler import resolve_sampler, sample
from solrl_core.storage import load_tensors, remove_tree, replace_dir, save_image
from solrl_core.stages.context import (
    EMA_FILE,
    attach_policy,
    fresh_transformer,
    load_adapters,
    load_backbone,
)

EVAL_SEED_BASE = 2_000_000_000


def eval_inputs(cfg: RunConfig) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(prompts, prompt_index per sample, seed per sample) of the evaluation."""
    prompts = eval_prompt_set(cfg)
    n = cfg.eval.seeds_per_prompt
    prompt_index = np.repeat(np.arange(len(prompts)), n)
    seeds = EVAL_SEED_BASE + np.arange(len(prompt_index))
    return prompts, prompt_index, seeds


def policy_transformer(cfg: RunConfig, checkpoint: Path, use_ema: bool = True) -> tuple[torch.nn.Module, bool]:
    """W0 + θ (or its EMA when the checkpoint has one) merged into a plain full-precision transformer."""
    backbone = load_backbone(cfg)
    policy = attach_policy(cfg, backbone)
    load_adapters(policy, checkpoint)
    ema_used = use_ema and (checkpoint / EMA_FILE).is_file()
    if ema_used:
        ema = EmaWeights(policy, max_decay=cfg.train.ema_max_decay)
        ema.load_state_dict(load_tensors(checkpoint / EMA_FILE))
        with ema.swapped_in(policy):
            merged = policy.merged_state_dict("default")
    else:
        merged = policy.merged_state_dict("default")
    del policy  # its module tree (W0 itself is shared with the cached backbone)
    transformer = fresh_transformer(backbone)
    transformer.load_state_dict(merged)
    return transformer, ema_used


def evaluate_checkpoint(
    cfg: RunConfig, checkpoint: Path, use_ema: bool = True, progress: bool = False, encode=None
) -> dict:
    """Mean of every evaluation reward (and their weighted total) over the fixed prompts and seeds.

    Samples with the run's solver (`model.sampler` or the backbone's default), `eval.steps` and `guidance.eval`;
    `encode` (prompts -> conditioning, e.g. a run's text cache) defaults to the backbone's text encoders."""
    backbone = load_backbone(cfg)
    encode = encode or backbone.encode_prompts
    sampler = resolve_sampler(cfg.model.sampler, backbone)
    guidance = cfg.guidance.eval
    uncond = encode([""]) if guidance != 1.0 and not backbone.defaults.distilled_guidance else None
    transformer, ema_used = policy_transformer(cfg, checkpoint, use_ema)
    prompts, prompt_index, seeds = eval_inputs(cfg)
    weights = cfg.eval.rewards or cfg.rewards
    totals, parts, images = [], [], []
    bs = cfg.eval.batch_size
    for start in tqdm(range(0, len(seeds), bs), desc="evaluate", leave=False, disable=not progress):
        batch_prompts = [prompts[i] for i in prompt_index[start : start + bs]]
        cond = encode(batch_prompts)
        noise = backbone.initial_noise(seeds[start : start + bs].tolist())
        x0 = sample(backbone, transformer, cond, noise, cfg.eval.steps, sampler=sampler, guidance=guidance,
                    uncond=uncond).x0
        batch_images = backbone.decode(x0)
        total, per = score_images(batch_images, batch_prompts, weights, models=cfg.reward_models)
        totals.append(total)
        parts.append(per)
        images.append(batch_images)
    metrics = {"reward": float(np.concatenate(totals).mean())}
    for name in weights:
        metrics[name] = float(np.concatenate([p[name] for p in parts]).mean())
    return {"metrics": metrics, "ema": ema_used, "samples": int(len(seeds)), "images": np.concatenate(images),
            "prompt_index": prompt_index, "prompts": prompts, "sampler": sampler}


def sample_grid(images: np.ndarray, per_row: int, scale: int = 3) -> np.ndarray:
    """Images (N, H, W, 3) in rows of `per_row` (one row per prompt), upscaled for viewing."""
    n, h, w, c = images.shape
    rows = -(-n // per_row)
    padded = np.concatenate([images, np.full((rows * per_row - n, h, w, c), 255, np.uint8)])
    grid = padded.reshape(rows, per_row, h, w, c).transpose(0, 2, 1, 3, 4).reshape(rows * h, per_row * w, c)
    return grid.repeat(scale, axis=0).repeat(scale, axis=1)


def eval_dir(run, step: int) -> Path:
    """Where the evaluation after `step` updates lives (step 0 = the initial policy)."""
    return run.root / "eval" / f"step_{step:04d}"


def run_eval(run, cfg: RunConfig, step: int, progress: bool = False) -> dict:
    """Evaluate the policy after `step` iterations once; later calls return the stored metrics."""
    import json

    from PIL import Image

    from solrl_core.rundir import write_json_atomic
    from solrl_core.stages.context import StageContext, ensure_initial_checkpoint

    out = eval_dir(run, step)
    if (out / "metrics.json").is_file():
        return json.loads((out / "metrics.json").read_text())
    checkpoint = ensure_initial_checkpoint(StageContext(run, cfg, 0)) if step == 0 else run.checkpoint_dir(step - 1)
    context = StageContext(run, cfg, step, progress)
    result = evaluate_checkpoint(cfg, checkpoint, progress=progress, encode=context.encode)
    partial = out.with_name(out.name + ".partial")
    remove_tree(partial)
    partial.mkdir(parents=True)
    save_image(Image.fromarray(sample_grid(result["images"], cfg.eval.seeds_per_prompt)), partial / "samples.png")
    summary = {"step": step, "metrics": result["metrics"], "ema": result["ema"], "samples": result["samples"],
               "prompts": result["prompts"], "sampler": result["sampler"], "guidance": cfg.guidance.eval}
    write_json_atomic(partial / "metrics.json", summary)
    replace_dir(partial, out)
    return summary
