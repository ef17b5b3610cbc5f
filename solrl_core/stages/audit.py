"""audit: the full-fidelity check of the cheap explore (optional; every `audit.every` iterations).

The regular pipeline regenerates only the K selected seeds per prompt, so its ranking fidelity (score_final) is
measured on a biased subset: the extremes. The audit regenerates the WHOLE explore pool of the iteration with the
full-precision θ_old (W0 with θ_old as a LoRA branch, the same model and step count as the regenerate stage, same seeds, hence the same
initial noise), scores it with the training rewards, and compares the proxy reward with that full-precision reward
over whole prompt groups:

* Spearman ρ and Kendall τ-b, the mean over prompt groups (``*_within_prompt``: what selection depends on, since it
  ranks inside a group) and over all candidates pooled (``*_pooled``);
* top/bottom overlap: per prompt, the fraction of the K/2 best (worst) seeds by proxy that are also among the K/2
  best (worst) by the full-precision reward, averaged over prompts (ranking ties: lower candidate index first, as in
  selection). 1.0 means selection from the proxy keeps exactly the seeds a full-precision explore would keep;
* the same fidelity restricted to the selected seeds (the figure score_final reports), as a cross-check.

Artifact: ``iter_XXXX/audit/`` with ``pool.zarr`` (the full-precision samples, one row per explore candidate, same
order), ``rewards.zarr`` (``reward`` = full precision, ``proxy_reward``) and ``summary.json``. Completion marker:
``iter_XXXX/manifests/audit.json``. The audit is not one of the pipeline's STAGES: nothing downstream reads it, and
``solrl status`` lists the training stages only.
"""

from __future__ import annotations

import time

import numpy as np

from solrl_core.edit_sources import pool_sources
from solrl_core.config.schema import RunConfig
from solrl_core.run.pool import read_table, write_table
from solrl_core.run.rundir import write_json_atomic
from solrl_core.stages.context import StageContext
from solrl_core.stages.old_policy import old_policy_transformer
from solrl_core.stages.pool_scoring import PoolScoring, pool_scoring
from solrl_core.stages.sampling import PoolSampling
from solrl_core.stages.shards import sample_pool, split_or_whole
from solrl_core.rl.selection import kept_per_prompt

AUDIT = "audit"


def audit_due(cfg: RunConfig, iteration: int) -> bool:
    """Whether iteration `iteration` (from 0) is audited: every `audit.every`-th one, counting from 1."""
    every = cfg.audit.every
    return every > 0 and (iteration + 1) % every == 0


def _ranked(reward: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Members of one group, best first; ties: lower candidate index first (the selection stage's order)."""
    return members[np.lexsort((members, -reward[members]))]


def extremes_overlap(proxy, full, prompt_index, half: int) -> dict[str, float]:
    """Mean over prompt groups of |top_half(proxy) ∩ top_half(full)| / half, and the same for the bottom."""
    proxy = np.asarray(proxy, dtype=np.float64)
    full = np.asarray(full, dtype=np.float64)
    prompt_index = np.asarray(prompt_index)
    top, bottom = [], []
    for prompt in np.unique(prompt_index):
        members = np.flatnonzero(prompt_index == prompt)
        h = min(half, len(members))
        if h < 1:
            continue
        by_proxy, by_full = _ranked(proxy, members), _ranked(full, members)
        top.append(len(set(by_proxy[:h].tolist()) & set(by_full[:h].tolist())) / h)
        bottom.append(len(set(by_proxy[-h:].tolist()) & set(by_full[-h:].tolist())) / h)
    nan = float("nan")
    return {"topk_overlap": float(np.mean(top)) if top else nan,
            "bottomk_overlap": float(np.mean(bottom)) if bottom else nan}


def audit_numbers(proxy, full, prompt_index, k: int, selected=None) -> dict:
    """Every figure of the audit summary from the per-candidate arrays (pure; see the module docstring).

    `k` is the selection's K (the overlap uses K/2 per side, at least 1); `selected` are candidate indices of the
    selected seeds (None: no cross-check)."""
    from solrl_core.rl.fidelity import ranking_fidelity

    prompt_index = np.asarray(prompt_index)
    fid = ranking_fidelity(proxy, full, prompt_index)
    half = max(1, k // 2)
    out = {
        "spearman_within_prompt": fid["spearman_within_prompt"],
        "kendall_within_prompt": fid["kendall_within_prompt"],
        "spearman_pooled": fid["spearman"],
        "kendall_pooled": fid["kendall"],
        "n_prompt_groups": int(fid["n_prompt_groups"]),
        "candidates": int(len(prompt_index)),
        "prompts": int(len(np.unique(prompt_index))),
        "k_half": half,
        **extremes_overlap(proxy, full, prompt_index, half),
    }
    if selected is not None:
        selected = np.asarray(selected, dtype=np.int64)
        sel = ranking_fidelity(np.asarray(proxy)[selected], np.asarray(full)[selected], prompt_index[selected])
        out["selected"] = {key: float(value) for key, value in sel.items()}
    return out


def sampling(ctx: StageContext) -> PoolSampling:
    """The whole explore pool again with the full-precision copy and the regenerate stage's steps."""
    cfg = ctx.cfg
    pool, pool_attrs = read_table(ctx.artifact("explore", "pool.zarr"), ["prompt_index", "seed"])
    steps = cfg.regenerate.steps
    return PoolSampling(
        path=ctx.run.partial_dir(ctx.iteration, AUDIT) / "pool.zarr",
        prompts=list(pool_attrs["prompts"]),
        prompt_index=pool["prompt_index"],
        seeds=pool["seed"],
        steps=steps,
        batch_size=cfg.regenerate.batch_size,
        keep_latents=False,
        attrs={"precision": "fp32", "iteration": ctx.iteration, "audit": True},
        desc=f"audit it{ctx.iteration} (fp32, {steps} steps, whole pool)",
        model=old_policy_transformer,
        extra_columns={"candidate_index": np.arange(len(pool["seed"]), dtype=np.int64)},
        sources=pool_sources(pool_attrs),
    )


def scoring(ctx: StageContext) -> PoolScoring:
    return pool_scoring(ctx, ctx.run.partial_dir(ctx.iteration, AUDIT) / "pool.zarr", f"score audit it{ctx.iteration}")


def run_audit(ctx: StageContext) -> dict:
    """Regenerate and score the whole explore pool at full precision; write the artifact; return the summary."""
    cfg = ctx.cfg
    pool, pool_attrs = read_table(ctx.artifact("explore", "pool.zarr"), ["prompt_index", "seed"])
    proxy = read_table(ctx.artifact("score_explore", "rewards.zarr"), ["reward"])[0]["reward"]
    selected = None
    if ctx.run.is_complete(ctx.iteration, "select"):
        selected = read_table(ctx.artifact("select", "selection.zarr"), ["candidate_index"])[0]["candidate_index"]
    k = kept_per_prompt(cfg.select, cfg.explore.seeds_per_prompt)
    with ctx.run.stage_output(ctx.iteration, AUDIT, resume_partial=True) as out:
        start = time.perf_counter()
        sample_shards = sample_pool(ctx, sampling, overlap=False)[1]
        sample_seconds = time.perf_counter() - start
        (full, per), score_shards = split_or_whole(ctx, scoring)
        columns = {"reward": full, "proxy_reward": proxy.astype(np.float32)}
        columns.update({f"reward_{name}": values for name, values in per.items()})
        write_table(out / "rewards.zarr", columns)
        summary = audit_numbers(proxy, full, pool["prompt_index"], k, selected)
        summary.update(
            iteration=ctx.iteration,
            explore_precision=str(pool_attrs.get("precision")),
            explore_steps=int(pool_attrs.get("steps", 0)),
            full_precision="fp32",
            full_steps=cfg.regenerate.steps,
            sample_seconds=round(sample_seconds, 3),
            proxy_mean=float(np.mean(proxy)),
            full_mean=float(np.mean(full)),
        )
        write_json_atomic(out / "summary.json", summary)
    return {**summary, "shards": sample_shards, "score_shards": score_shards}
