"""score: reward every image of a pool (explore pool -> proxy reward; training set -> final reward R).

With `score.overlap` the sampling stages already scored their rows while sampling (`scores.zarr` beside the pool);
these stages then score only what is missing. Either way the scores, and `rewards.zarr`, are the same
(solrl_core/stages/pool_scoring.py). With several devices (`orchestration.devices`) the rows are scored in shards,
one per device, with the same scores (solrl_core/stages/shards.py).
"""

from __future__ import annotations

import numpy as np

from solrl_core.run.pool import read_table, write_table
from solrl_core.stages.context import StageContext
from solrl_core.stages.pool_scoring import PoolScoring, pool_scoring
from solrl_core.stages.shards import split_or_whole

__all__ = ["run_score_explore", "run_score_final", "explore_scoring", "final_scoring"]


def _stats(reward: np.ndarray) -> dict:
    return {
        "mean": float(reward.mean()),
        "min": float(reward.min()),
        "max": float(reward.max()),
        "std": float(reward.std()),
    }


def explore_scoring(ctx: StageContext) -> PoolScoring:
    return pool_scoring(ctx, ctx.artifact("explore", "pool.zarr"), f"score explore it{ctx.iteration}")


def final_scoring(ctx: StageContext) -> PoolScoring:
    return pool_scoring(ctx, ctx.artifact("regenerate", "samples.zarr"), f"score regenerated it{ctx.iteration}")


def run_score_explore(ctx: StageContext) -> dict:
    (reward, per), shards = split_or_whole(ctx, explore_scoring)
    with ctx.run.stage_output(ctx.iteration, "score_explore") as out:
        write_table(out / "rewards.zarr", {"reward": reward, **{f"reward_{k}": v for k, v in per.items()}})
    return {**_stats(reward), "shards": shards}


def run_score_final(ctx: StageContext) -> dict:
    """Reward R of the training samples. Without regeneration they are explore candidates: R is their proxy."""
    from solrl_core.rl.fidelity import ranking_fidelity

    samples_path = ctx.artifact("regenerate", "samples.zarr")
    (cols, attrs) = read_table(samples_path, ["candidate_index", "prompt_index"])
    proxy_all, _ = read_table(ctx.artifact("score_explore", "rewards.zarr"), ["reward"])
    proxy = proxy_all["reward"][cols["candidate_index"]]
    shards: list[dict] = []
    if attrs.get("regenerated"):
        (reward, per), shards = split_or_whole(ctx, final_scoring)
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
    return {**summary, "shards": shards}
