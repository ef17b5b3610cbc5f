"""End to end through the CLI and the loopback Prefect server: `solrl bench` on a tiny bench config (baseline and
sol_rl, 1 seed, 1 iteration, sol_rl audited), run once for the module; then the audit of the sol_rl run and the
report are checked."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pytest
import yaml

from repo_paths import ROOT
from solrl_core.run.pool import read_table
from solrl_core.rl.fidelity import ranking_fidelity
from solrl_core.run.rundir import STAGES

# Shapes shared by both families (N and K stay the families' own: baseline 6 of 6, sol_rl 6 of 24).
SMALL = {"prompts.per_iteration": 2, "explore.steps": 2, "explore.batch_size": 48, "regenerate.steps": 3,
         "regenerate.batch_size": 48, "train.lora_rank": 4, "train.lora_alpha": 8, "eval.num_prompts": 2,
         "eval.seeds_per_prompt": 1, "eval.steps": 2, "eval.batch_size": 8, "tracking.grid_prompts": 0}
N, P = 24, 2  # sol_rl's explore pool: seeds per prompt (the family's own), prompts


def table(run_dir: Path, iteration: int, stage: str, name: str, cols=None):
    return read_table(run_dir / f"iter_{iteration:04d}" / stage / name, cols)


@pytest.fixture(scope="module")
def bench(session_env, tmp_path_factory):
    from cli_processes import solrl

    base = tmp_path_factory.mktemp("bench")
    config = base / "bench.yaml"
    config.write_text(yaml.safe_dump({
        "name": "tinybench",
        "families": [str(ROOT / "configs" / "families" / f) for f in ("baseline.yaml", "sol_rl.yaml")],
        "iterations": 3, "seeds": 1, "eval_every": 1, "audit_every": 1,
        "overrides": SMALL,
        "cost": {"model": "embedded", "gpu": "b200"},
        "tracking": {"uri": session_env["SOLRL_TEST_TRACKING_URI"], "experiment": "solrl-bench-test"},
    }))
    out = base / "out"
    proc = solrl(session_env, "bench", str(config), "--run-dir", str(out), "--no-progress", "--set", "iterations=1")
    return out, proc


def test_audit_regenerates_the_whole_pool(bench):
    out, _ = bench
    run_dir = out / "sol_rl-s0"
    assert not (out / "baseline-s0" / "iter_0000" / "manifests" / "audit.json").exists()  # fp32 explore
    manifest = json.loads((run_dir / "iter_0000" / "manifests" / "audit.json").read_text())
    summary = json.loads((run_dir / "iter_0000" / "audit" / "summary.json").read_text())
    assert manifest["stage"] == "audit" and manifest["summary"]["candidates"] == N * P == summary["candidates"]
    assert not (run_dir / "iter_0000" / "audit.partial").exists()

    # every candidate of the explore pool, same seeds and prompts in the same order, full precision, regenerate steps
    pool, _ = table(run_dir, 0, "explore", "pool.zarr", ["prompt_index", "seed"])
    audit, attrs = table(run_dir, 0, "audit", "pool.zarr", ["prompt_index", "seed", "candidate_index", "image"])
    assert attrs["committed"] == N * P and attrs["precision"] == "fp32" and attrs["steps"] == SMALL["regenerate.steps"]
    np.testing.assert_array_equal(audit["seed"], pool["seed"])
    np.testing.assert_array_equal(audit["prompt_index"], pool["prompt_index"])
    np.testing.assert_array_equal(audit["candidate_index"], np.arange(N * P))

    proxy = table(run_dir, 0, "score_explore", "rewards.zarr", ["reward"])[0]["reward"]
    rewards, _ = table(run_dir, 0, "audit", "rewards.zarr", ["reward", "proxy_reward"])
    np.testing.assert_array_equal(rewards["proxy_reward"], proxy)

    # on the selected seeds the audit reproduces the regenerate stage, so its fidelity agrees with score_final's
    chosen = table(run_dir, 0, "select", "selection.zarr", ["candidate_index"])[0]["candidate_index"]
    regen, _ = table(run_dir, 0, "regenerate", "samples.zarr", ["image"])
    diff = np.abs(audit["image"][chosen].astype(int) - regen["image"].astype(int))
    assert diff.max() <= 1, f"audit images differ from the regenerated ones by up to {diff.max()}"
    final = json.loads((run_dir / "iter_0000" / "manifests" / "score_final.json").read_text())["summary"]
    same_way = ranking_fidelity(proxy[chosen], rewards["reward"][chosen], pool["prompt_index"][chosen])
    assert same_way["spearman"] == pytest.approx(final["fidelity_spearman"], abs=0.02)
    assert summary["selected"]["spearman"] == pytest.approx(same_way["spearman"])
    for key in ("spearman_within_prompt", "kendall_within_prompt", "topk_overlap", "bottomk_overlap"):
        assert -1 <= summary[key] <= 1, key

    # solrl status lists the training stages only; the audit's numbers are in the run's MLflow run
    info = json.loads((run_dir / "run.json").read_text())
    mlflow.set_tracking_uri(info["tracking_uri"])
    client = mlflow.tracking.MlflowClient()
    for key in ("audit/spearman", "audit/kendall", "audit/topk_overlap", "audit/bottomk_overlap"):
        history = client.get_metric_history(info["mlflow_run_id"], key)
        assert [m.step for m in history] == [0], key
    assert client.get_metric_history(info["mlflow_run_id"], "audit/spearman")[0].value == pytest.approx(
        summary["spearman_within_prompt"])


def test_status_ignores_the_audit(bench, run_cli):
    st = json.loads(run_cli("status", "--run-dir", str(bench[0] / "sol_rl-s0"), "--json").stdout)
    assert [it["stages"] for it in st["iterations"]] == [{s: "complete" for s in STAGES}]


def test_bench_report_of_two_families(bench):
    out, proc = bench
    assert "report" in proc.stdout and "baseline" in proc.stdout
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["baseline-s0", "plots", "sol_rl-s0"]
    for run in ("baseline-s0", "sol_rl-s0"):
        assert (out / run / "eval" / "step_0001" / "metrics.json").is_file()

    md = (out / "report.md").read_text()
    for section in ("## Families", "## Final held-out evaluation reward", "## Time to target",
                    "## Cost per iteration", "## Ranking fidelity", "### Full-fidelity audit", "## Verdicts",
                    "## Runs", "embedded model's own forward"):
        assert section in md, section
    report = json.loads((out / "report.json").read_text())
    assert set(report["families"]) == {"baseline", "sol_rl"}
    for fam in report["families"].values():
        assert fam["curve"]["steps"] == [0, 1] and fam["iterations_done"] == 1  # --set iterations=1 applied
        assert fam["gpu_seconds_per_iteration"]["iteration"] > 0 and fam["cpu_seconds_per_iteration"]["iteration"] > 0
    baseline = report["families"]["baseline"]  # pre-registered: the baseline's start plus the config's gain
    assert report["target"] == pytest.approx(baseline["initial_reward"] + report["target_gain"])
    assert baseline["initial_reward"] == pytest.approx(baseline["curve"]["reward"][0])
    assert list(report["audits"]) == ["sol_rl"]
    for name in ("eval_vs_iteration", "eval_vs_cpu_seconds", "eval_vs_gpu_cost", "fidelity", "cost_per_iteration"):
        assert (out / "plots" / f"{name}.png").stat().st_size > 1000

    info = json.loads((out / "mlflow.json").read_text())
    mlflow.set_tracking_uri(info["tracking_uri"])
    client = mlflow.tracking.MlflowClient()
    names = {a.path for a in client.list_artifacts(info["mlflow_run_id"], "bench")}
    assert {"bench/report.md", "bench/report.json", "bench/eval_vs_gpu_cost.png"} <= names
    assert client.get_metric_history(info["mlflow_run_id"], "bench/sol_rl/final_reward")
