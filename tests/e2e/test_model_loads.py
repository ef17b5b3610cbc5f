"""One model load per device per run: with several devices the flow process loads none, and each device's worker
loads the model once and keeps it for every stage of every iteration, the evaluations and the update's ranks.

Every piece of work a process runs is recorded in the stage manifests with that process's pid and how many models
it had loaded by then (solrl_core/stages/shards.py); a load in the flow process would stop the run
(solrl_core/models/backbones/cache.py refuse_model_loads)."""

from __future__ import annotations

import json

import pytest

from cli_processes import SMALLER_SETS, tracking_set
from repo_paths import TINY
from solrl_core.run.stage_table import STAGES

pytestmark = pytest.mark.e2e

ITERATIONS = 2  # a second iteration, and the evaluation after it, reuse what the first loaded
# the smaller run, with batches small enough that each stage and evaluation has work for both devices
SMALL = [*SMALLER_SETS, "regenerate.batch_size=2", "train.micro_batch=4",
         "eval.num_prompts=2", "eval.seeds_per_prompt=1", "eval.steps=2", "eval.batch_size=1"]


def _records(run_dir) -> dict[str, list[dict]]:
    """What ran where: the records of every stage of every iteration and of every evaluation, by what they did."""
    out: dict[str, list[dict]] = {}
    for it in range(ITERATIONS):
        for stage in STAGES:
            summary = json.loads((run_dir / f"iter_{it:04d}" / "manifests" / f"{stage}.json").read_text())["summary"]
            for key in ("shards", "score_shards"):
                out.setdefault(stage, []).extend(summary.get(key, []))
    for metrics in sorted(run_dir.glob("eval/step_*/metrics.json")):
        data = json.loads(metrics.read_text())
        out.setdefault("eval", []).extend(data["shards"] + data["score_shards"])
    return out


def test_each_device_loads_the_model_once_over_a_run(run_cli, session_env, tmp_path):
    run_dir = tmp_path / "run"
    settings = [f"iterations={ITERATIONS}", f"eval.every={ITERATIONS}", "orchestration.devices=[cpu, cpu]",
                "train.processes=2", *SMALL]
    run_cli("train", str(TINY), "--run-dir", str(run_dir), "--quiet", *tracking_set(session_env),
            *[arg for setting in settings for arg in ("--set", setting)], timeout=900)
    records = _records(run_dir)
    everything = [r for rs in records.values() for r in rs]
    workers = {r["pid"] for r in everything}
    assert len(workers) == 2  # the same two worker processes all run long
    for pid in workers:
        assert max(r["model_loads"] for r in everything if r["pid"] == pid) == 1, f"worker {pid} loaded again"
    for stage in ("quantize", "explore", "regenerate", "update", "eval"):
        assert records[stage], f"{stage} ran in no worker"
    update_ranks = records["update"]
    assert len(update_ranks) == 2 * ITERATIONS and all({r["pid"] for r in update_ranks[i:i + 2]} == workers
                                                        for i in range(0, len(update_ranks), 2))
    assert len(list(run_dir.glob("eval/step_*/metrics.json"))) == 2  # before training and after the last iteration
