"""score: reward every image of a pool (explore pool -> proxy reward; training set -> final reward R)."""

from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

from solrl_core.pool import read_table, write_table
from solrl_core.rewards.registry import score_images
from solrl_core.stages.context import StageContext

SCORE_BATCH = 64


def score_pool(ctx: StageContext, pool_path, desc: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Weighted reward and per-reward columns for every committed row of the pool at `pool_path`."""
    import zarr

    group = zarr.open_group(pool_path, mode="r")
    prompts = list(group.attrs["prompts"])
    prompt_index = np.asarray(group["prompt_index"][...])
    n = len(prompt_index)
    totals, parts = [], []
    for start in tqdm(range(0, n, SCORE_BATCH), desc=desc, disable=not ctx.progress, leave=False):
        images = np.asarray(group["image"][start : start + SCORE_BATCH])
        batch_prompts = [prompts[i] for i in prompt_index[start : start + SCORE_BATCH]]
        total, per_reward = score_images(images, batch_prompts, ctx.cfg.rewards, models=ctx.cfg.reward_models)
        totals.append(total)
        parts.append(per_reward)
    per = {k: np.concatenate([p[k] for p in parts]).astype(np.float32) for k in (parts[0] if parts else {})}
    return np.concatenate(totals).astype(np.float32) if totals else np.zeros(0, np.float32), per


def _stats(reward: np.ndarray) -> dict:
    return {
        "mean": float(reward.mean()),
        "min": float(reward.min()),
        "max": float(reward.max()),
        "std": float(reward.std()),
    }


def run_score_explore(ctx: StageContext) -> dict:
    reward, per = score_pool(ctx, ctx.artifact("explore", "pool.zarr"), f"score explore it{ctx.iteration}")
    with ctx.run.stage_output(ctx.iteration, "score_explore") as out:
        write_table(out / "rewards.zarr", {"reward": reward, **{f"reward_{k}": v for k, v in per.items()}})
    return _stats(reward)


def run_score_final(ctx: StageContext) -> dict:
    """Reward R of the training samples. Without regeneration they are explore candidates: R is their proxy."""
    from solrl_core.rl.fidelity import ranking_fidelity

    samples_path = ctx.artifact("regenerate", "samples.zarr")
    (cols, attrs) = read_table(samples_path, ["candidate_index", "prompt_index"])
    proxy_all, _ = read_table(ctx.artifact("score_explore", "rewards.zarr"), ["reward"])
    proxy = proxy_all["reward"][cols["candidate_index"]]
    if attrs.get("regenerated"):
        reward, per = score_pool(ctx, samples_path, f"score regenerated it{ctx.iteration}")
        fidelity = ranking_fidelity(proxy, reward, cols["prompt_index"])
    else:
        reward, per, fidelity = proxy.astype(np.float32), {}, {}
    with ctx.run.stage_output(ctx.iteration, "score_final") as out:
        write_table(
            out / "rewards.zarr",
            {"reward": reward, "proxy_reward": proxy, **{f"reward_{k}": v for k, v in per.items()}},
            attrs={"regenerated": bool(attrs.get("regenerated"))},
        )
    summary = _stats(reward)
    summary.update({f"fidelity_{k}": float(v) for k, v in fidelity.items()})
    return summary
