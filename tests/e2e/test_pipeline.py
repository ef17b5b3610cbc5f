"""The whole pipeline through the CLI and Prefect: one demo iteration, families, kill/resume, forced re-runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import numpy as np
import pytest
import zarr
from safetensors.numpy import load_file

from cli_processes import tracking_set
from repo_paths import ROOT, TINY
from solrl_core.config.loading import load_config
from solrl_core.method import run_iteration
from solrl_core.run.pool import read_table
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run_config import load_run_config, prepare_run
from solrl_core.stages.runner import plain_step_runner, run_stage


def table(run_dir: Path, iteration: int, stage: str, name: str, cols=None):
    return read_table(run_dir / f"iter_{iteration:04d}" / stage / name, cols)


def status(run_cli, run_dir):
    return json.loads(run_cli("status", "--run-dir", str(run_dir), "--json").stdout)


def test_one_iteration_of_the_demo_config(run_cli, session_env, tmp_path):
    run_dir = tmp_path / "demo"
    # the demo's iteration as shipped (its N, K, steps, precisions, update) over 2 of its 8 prompts, and its
    # evaluation (104 samples, twice) smaller: what is checked is per prompt, and the full sizes cost 4 times more
    smaller = ["prompts.per_iteration=2", "eval.num_prompts=4", "eval.seeds_per_prompt=2"]
    run_cli("train", str(ROOT / "configs" / "demo.yaml"), "--iterations", "1", "--run-dir", str(run_dir),
            "--no-progress", *(a for s in smaller for a in ("--set", s)), *tracking_set(session_env))
    cfg = load_config(ROOT / "configs" / "demo.yaml", smaller)
    st = status(run_cli, run_dir)
    assert [it["stages"] for it in st["iterations"]] == [{s: "complete" for s in STAGES}]
    assert st["mlflow"]["run_id"] and st["mlflow"]["tracking_uri"] == session_env["SOLRL_TEST_TRACKING_URI"]

    n, p, k = cfg.explore.seeds_per_prompt, cfg.prompts.per_iteration, cfg.select.k
    pool, attrs = table(run_dir, 0, "explore", "pool.zarr", ["prompt_index", "seed", "image"])
    assert attrs["committed"] == n * p and attrs["steps"] == 6
    assert attrs["precision"] == "nvfp4_emulated"  # what `auto` picks on a CPU
    assert np.bincount(pool["prompt_index"]).tolist() == [n] * p
    assert len(set(pool["seed"].tolist())) == n * p
    assert pool["image"].shape == (n * p, 32, 32, 3) and pool["image"].dtype == np.uint8

    proxy = table(run_dir, 0, "score_explore", "rewards.zarr", ["reward"])[0]["reward"]
    chosen = table(run_dir, 0, "select", "selection.zarr", ["candidate_index"])[0]["candidate_index"]
    for prompt in range(p):
        members = np.flatnonzero(pool["prompt_index"] == prompt)
        ranked = members[np.argsort(proxy[members], kind="stable")]
        expected = set(ranked[: k // 2].tolist()) | set(ranked[-(k // 2):].tolist())
        assert set(c for c in chosen.tolist() if pool["prompt_index"][c] == prompt) == expected

    regen, rattrs = table(run_dir, 0, "regenerate", "samples.zarr", ["candidate_index", "seed", "latent"])
    np.testing.assert_array_equal(regen["candidate_index"], chosen)
    np.testing.assert_array_equal(regen["seed"], pool["seed"][chosen])  # same initial noise
    assert rattrs["regenerated"] and rattrs["steps"] == 10 and rattrs["precision"] == "fp32"
    final, _ = table(run_dir, 0, "score_final", "rewards.zarr", ["reward", "proxy_reward"])
    np.testing.assert_allclose(final["proxy_reward"], proxy[chosen])
    assert np.isfinite(final["reward"]).all()

    ckpt = run_dir / "iter_0000" / "update" / "checkpoint"
    init = load_file(str(run_dir / "init" / "adapters.safetensors"))
    after = load_file(str(ckpt / "adapters.safetensors"))
    assert set(init) == set(after)
    assert any(not np.array_equal(init[key], after[key]) for key in init if key.startswith("default."))
    assert json.loads((ckpt / "state.json").read_text())["step"] == cfg.train.optimizer_steps

    mlflow.set_tracking_uri(st["mlflow"]["tracking_uri"])
    client = mlflow.tracking.MlflowClient()
    history = client.get_metric_history(st["mlflow"]["run_id"], "reward/train_mean")
    assert [m.step for m in history] == [0]
    assert history[0].value == pytest.approx(float(final["reward"].mean()), rel=1e-5)
    for key in ("reward/explore_mean", "fidelity/spearman", "fidelity/kendall", "loss/total", "train/grad_norm",
                "loss/kl_to_reference", "time/explore_s"):
        assert client.get_metric_history(st["mlflow"]["run_id"], key), key

    evals = client.get_metric_history(st["mlflow"]["run_id"], "eval/embedded")
    assert sorted(m.step for m in evals) == [0, 1]  # before training and after the last iteration
    stored = json.loads((run_dir / "eval" / "step_0001" / "metrics.json").read_text())
    assert stored["ema"] is True and stored["samples"] == cfg.eval.num_prompts * cfg.eval.seeds_per_prompt
    assert {m.step: m.value for m in evals}[1] == pytest.approx(stored["metrics"]["embedded"])

    inspect = json.loads(run_cli("inspect", "--run-dir", str(run_dir), "--iteration", "0", "--json").stdout)
    assert inspect["candidates"] == n * p and inspect["selected"] == k * p
    assert all(len(pp["selected"]) == k for pp in inspect["per_prompt"])
    # one device: every splittable stage ran whole, in the flow's own process, on the CPU
    assert set(inspect["shards"]) == {"quantize", "explore", "score_explore", "regenerate", "score_final", "update"}
    assert all(len(s) == 1 and s[0]["device"] == "cpu" for s in inspect["shards"].values())
    assert len({s[0]["pid"] for s in inspect["shards"].values()}) == 1
    assert client.get_metric_history(st["mlflow"]["run_id"], "shards/explore_devices")[0].value == 1
    text = run_cli("inspect", "--run-dir", str(run_dir), "--iteration", "0").stdout
    assert f"explore          cpu (pid {inspect['shards']['explore'][0]['pid']} on " in text


@pytest.mark.parametrize("family", ["baseline", "naive_quant"])
def test_families_run_through_the_same_flow(run_cli, session_env, tmp_path, family):
    run_dir = tmp_path / family
    sets = ["--set", "prompts.per_iteration=2", "--set", "explore.steps=3", "--set", "train.lora_rank=4",
            "--set", "eval.every=0"]
    if family == "baseline":
        sets += ["--set", "explore.seeds_per_prompt=4", "--set", "select.k=4"]
    else:
        sets += ["--set", "explore.seeds_per_prompt=8", "--set", "select.k=4"]
    run_cli("train", str(ROOT / "configs" / "families" / f"{family}.yaml"), "--iterations", "1", "--run-dir",
            str(run_dir), "--no-progress", *tracking_set(session_env), *sets)
    samples, attrs = table(run_dir, 0, "regenerate", "samples.zarr", ["candidate_index", "latent", "image"])
    assert attrs["regenerated"] is False  # trains on the explore samples themselves
    pool_latent = zarr.open_group(run_dir / "iter_0000" / "explore" / "pool.zarr")["latent"][...]
    np.testing.assert_array_equal(samples["latent"], pool_latent[samples["candidate_index"]])
    final, fattrs = table(run_dir, 0, "score_final", "rewards.zarr", ["reward", "proxy_reward"])
    np.testing.assert_array_equal(final["reward"], final["proxy_reward"])
    if family == "baseline":
        assert sorted(samples["candidate_index"].tolist()) == list(range(8))


def _committed(pool: Path) -> int:
    try:
        return int(json.loads((pool / "zarr.json").read_text())["attributes"]["committed"])
    except (OSError, ValueError, KeyError):
        return -1


def _compare_runs(a: Path, b: Path, iterations: int) -> None:
    for it in range(iterations):
        for stage, name in [("explore", "pool.zarr"), ("score_explore", "rewards.zarr"),
                            ("select", "selection.zarr"), ("regenerate", "samples.zarr"),
                            ("score_final", "rewards.zarr")]:
            ca, _ = table(a, it, stage, name)
            cb, _ = table(b, it, stage, name)
            assert ca.keys() == cb.keys()
            for key in ca:
                np.testing.assert_array_equal(ca[key], cb[key], err_msg=f"iter {it} {stage} {key}")
        for name in ("adapters.safetensors", "ema.safetensors", "optimizer.safetensors"):
            ta = load_file(str(a / f"iter_{it:04d}" / "update" / "checkpoint" / name))
            tb = load_file(str(b / f"iter_{it:04d}" / "update" / "checkpoint" / name))
            assert ta.keys() == tb.keys()
            for key in ta:
                np.testing.assert_array_equal(ta[key], tb[key], err_msg=f"iter {it} {name} {key}")


def _uninterrupted(run_dir: Path, overrides: list[str]) -> None:
    """The run trained whole in this process: every stage of every iteration in turn, as `solrl train` runs them
    (plain_step_runner: the same run_stage, without Prefect and MLflow around it)."""
    run = RunDir(run_dir)
    with run.hold():
        prepare_run(run, load_config(TINY, overrides))
        cfg = load_run_config(run)
        for iteration in range(cfg.iterations):
            run_iteration(cfg, iteration, plain_step_runner(run, cfg))


def test_sigkill_inside_explore_then_resume_matches_uninterrupted_run(run_cli, session_env, tmp_path):
    # 16 seeds one at a time: a kill lands inside the explore; the fewest steps: what is compared is bits, not quality
    overrides = ["explore.seeds_per_prompt=16", "explore.batch_size=1", "explore.steps=2", "regenerate.steps=2"]
    sets = [*tracking_set(session_env), "--no-progress", *(a for o in overrides for a in ("--set", o))]
    reference = tmp_path / "reference"  # the uninterrupted run, here (a `solrl train` start-up fewer)
    _uninterrupted(reference, overrides)

    killed = tmp_path / "killed"
    pool = killed / "iter_0001" / "explore.partial" / "pool.zarr"
    proc = subprocess.Popen([sys.executable, "-m", "solrl", "train", str(TINY), "--run-dir", str(killed), *sets],
                            env=session_env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 300
    while _committed(pool) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    committed = _committed(pool)
    assert 3 <= committed < 32, f"kill did not land inside explore (committed={committed})"
    assert not (killed / "iter_0001" / "manifests" / "explore.json").exists()

    run_cli("train", str(TINY), "--run-dir", str(killed), *sets)
    assert all(s == "complete" for it in status(run_cli, killed)["iterations"] for s in it["stages"].values())
    _compare_runs(reference, killed, iterations=2)

    # a forced re-run of one stage reproduces its artifact (here, as `solrl stage --force` runs it: through the CLI in
    # test_readme_commands.py)
    before, _ = table(killed, 0, "explore", "pool.zarr")
    run = RunDir(killed)
    with run.hold():
        run_stage(run, load_run_config(run), 0, "explore", force=True, progress=False)
    after, _ = table(killed, 0, "explore", "pool.zarr")
    for key in before:
        np.testing.assert_array_equal(before[key], after[key], err_msg=key)
