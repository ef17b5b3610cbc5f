"""One iteration's candidate pool as people read it: the per-candidate table, the per-prompt summary that
`solrl inspect` prints, and where the pool is in the MLflow UI. Every stage artifact read here is checked against its
manifest's inventory first (solrl_core/run/integrity.py), as the stages check theirs: a damaged file is refused in one
line naming it and the command that rebuilds it."""

from __future__ import annotations

import numpy as np

from solrl_core.errors import MissingInputError
from solrl_core.run.integrity import verify_stage
from solrl_core.mlflow_links import run_link
from solrl_core.run.pool import read_table
from solrl_core.run.rundir import RunDir


def _read(run: RunDir, iteration: int, stage: str, name: str, columns=None):
    """A zarr table of a complete stage's artifact, after checking the artifact's files."""
    verify_stage(run, iteration, stage)
    return read_table(run.stage_dir(iteration, stage) / name, columns)


def pool_table(run: RunDir, iteration: int) -> dict[str, np.ndarray]:
    """One row per explore candidate, in pool order: candidate, prompt_index, prompt, seed, proxy_reward (NaN until
    score_explore), final_reward (the reward of the training sample made from that seed; NaN where there is none),
    selected. With several rewards, also proxy_<name> and final_<name> per reward."""
    if not run.is_complete(iteration, "explore"):
        raise MissingInputError(f"iteration {iteration} of {run.root} has no complete explore pool yet")
    cols, attrs = _read(run, iteration, "explore", "pool.zarr", ["prompt_index", "seed"])
    n = len(cols["seed"])
    prompts = np.asarray(attrs["prompts"], dtype=object)
    table = {
        "candidate": np.arange(n, dtype=np.int64),
        "prompt_index": cols["prompt_index"].astype(np.int64),
        "prompt": prompts[cols["prompt_index"]],
        "seed": cols["seed"].astype(np.int64),
        "proxy_reward": np.full(n, np.nan),
        "final_reward": np.full(n, np.nan),
        "selected": np.zeros(n, dtype=bool),
    }
    if run.is_complete(iteration, "score_explore"):
        proxy, _ = _read(run, iteration, "score_explore", "rewards.zarr")
        table["proxy_reward"] = proxy["reward"].astype(np.float64)
        table.update(_components("proxy", proxy, np.arange(n), n))
    if run.is_complete(iteration, "select"):
        table["selected"] = _read(run, iteration, "select", "selection.zarr", ["selected"])[0]["selected"].astype(bool)
    if run.is_complete(iteration, "score_final"):
        rows = _read(run, iteration, "regenerate", "samples.zarr", ["candidate_index"])[0]["candidate_index"]
        final, _ = _read(run, iteration, "score_final", "rewards.zarr")
        table["final_reward"][rows] = final["reward"]
        table.update(_components("final", final, rows, n))
    return table


def _components(prefix: str, rewards: dict[str, np.ndarray], rows: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Per-reward columns (`reward_<name>` in the zarr table), only when there is more than one reward."""
    names = [k for k in rewards if k.startswith("reward_")]
    if len(names) < 2:
        return {}
    out = {}
    for name in names:
        column = np.full(n, np.nan)
        column[rows] = rewards[name]
        out[f"{prefix}_{name.removeprefix('reward_')}"] = column
    return out


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def pool_summary(run: RunDir, iteration: int) -> dict:
    table = pool_table(run, iteration)
    attrs = _read(run, iteration, "explore", "pool.zarr", [])[1]
    proxy, final = table["proxy_reward"], table["final_reward"]
    chosen = np.flatnonzero(table["selected"])
    per_prompt = []
    for p, prompt in enumerate(attrs["prompts"]):
        members = np.flatnonzero(table["prompt_index"] == p)
        picked = sorted((int(i) for i in chosen if table["prompt_index"][i] == p), key=lambda i: -proxy[i])
        per_prompt.append(
            {
                "prompt_index": p,
                "prompt": prompt,
                "n": int(len(members)),
                "proxy_mean": float(np.mean(proxy[members])),
                "proxy_min": float(np.min(proxy[members])),
                "proxy_max": float(np.max(proxy[members])),
                "selected": [
                    {"candidate": i, "seed": int(table["seed"][i]), "proxy": float(proxy[i]),
                     "final": _finite(final[i])}
                    for i in picked
                ],
            }
        )
    quantize = {}
    if run.is_complete(iteration, "quantize"):
        quantize = run.manifest(iteration, "quantize")["summary"]
    return {
        "iteration": iteration,
        "quantize": quantize,
        "candidates": int(len(proxy)),
        "prompts": len(attrs["prompts"]),
        "selected": int(len(chosen)),
        "explore_precision": attrs.get("precision"),
        "explore_steps": attrs.get("steps"),
        "per_prompt": per_prompt,
        "shards": stage_shards(run, iteration),
        "mlflow": mlflow_pool_link(run, iteration),
    }


def stage_shards(run: RunDir, iteration: int) -> dict[str, list[dict]]:
    """Where the model work of each complete stage of an iteration ran: its shards' (or the update's ranks') records
    (device, host, pid, seconds, rows, models loaded), from the stage manifests (solrl_core/stages/shards.py)."""
    from solrl_core.run.stage_table import TABLE

    out = {}
    for stage in (s.name for s in TABLE):
        if run.is_complete(iteration, stage):
            summary = run.manifest(iteration, stage)["summary"]
            for key in ("shards", "score_shards"):
                if summary.get(key):
                    out[stage if key == "shards" else f"{stage}_scoring"] = summary[key]
    return out


def shards_text(shards: dict[str, list[dict]]) -> str:
    """One line per stage: each shard's device, process and seconds."""
    return "\n".join(f"  {stage:<16} " + ", ".join(f"{s['device']} (pid {s['pid']} on {s['host']}) {s['seconds']:.1f} s"
                                                  for s in records) for stage, records in shards.items())


def logged_marker(run: RunDir, iteration: int):
    """Written once an iteration's metrics and pool are in MLflow (flows/tracking.py)."""
    return run.iteration_dir(iteration) / "manifests" / "logged.json"


def pool_artifact_path(iteration: int) -> str:
    """Where an iteration's pool table, grids, scatter plot and quantization report are in the MLflow run."""
    return f"pool/iter_{iteration:04d}"


def mlflow_pool_link(run: RunDir, iteration: int) -> dict | None:
    """Where an iteration's pool is in MLflow (None before the run's MLflow run exists): the run's link
    (solrl_core/mlflow_links.py: the UI of the server serving its store, in the training view; or the `mlflow ui`
    command that would serve it) at the pool's artifact path, and whether the pool is logged yet."""
    path = pool_artifact_path(iteration)
    link = run_link(run.run_info(), path)
    return link and {**link, "artifact_path": path, "logged": logged_marker(run, iteration).is_file()}


def mlflow_link_text(link: dict | None, iteration: int) -> str:
    """What `solrl inspect` prints about the pool in MLflow (`link` from `mlflow_pool_link`)."""
    if link is None:
        return "MLflow: this run has no MLflow run yet (`solrl train` creates it)"
    lines = [f"MLflow: pool of iteration {iteration} = run {link['run_id']}, artifacts {link['artifact_path']}/ "
             f"(tracking URI {link['tracking_uri']})"]
    if not link["logged"]:
        lines.append("  not logged yet: `solrl train` logs an iteration once its update is complete")
    if link["ui_command"]:
        lines.append(f"  start the UI: {link['ui_command']}")
    lines.append(f"  open: {link['url']}")
    return "\n".join(lines)
