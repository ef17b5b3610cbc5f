"""What the terminal shows of a run: `solrl train --quiet`, `solrl status` (done, interrupted, where to look), and
Prefect's info lines only with --verbose (the wording itself: tests/unit/cli/test_terminal_wording.py)."""

from __future__ import annotations

import json

import pytest

from cli_processes import SMALLER_RUN, solrl, tracking_set
from repo_paths import TINY


@pytest.fixture(scope="module")
def quiet_run(session_env, tmp_path_factory):
    """One tiny iteration with an evaluation after it, trained with --quiet."""
    run_dir = tmp_path_factory.mktemp("terminal") / "run"
    proc = solrl(session_env, "train", str(TINY), *SMALLER_RUN, "--iterations", "1", "--run-dir", str(run_dir),
                 "--quiet", "--set", "eval.every=1", "--set", "eval.num_prompts=1", "--set", "eval.seeds_per_prompt=2",
                 *tracking_set(session_env))
    return run_dir, proc


def test_quiet_train_prints_no_bars_and_the_summary(quiet_run):
    run_dir, proc = quiet_run
    assert "\r" not in proc.stderr and "%|" not in proc.stderr, proc.stderr
    assert "INFO" not in proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"trained 1 iteration in {run_dir};"), proc.stdout


def test_status_shows_target_done_evaluation_and_where_to_look(quiet_run, run_cli, session_env):
    run_dir, _ = quiet_run
    data = json.loads(run_cli("status", "--run-dir", str(run_dir), "--json").stdout)
    assert data["target_iterations"] == 1 and data["completed_iterations"] == 1
    assert data["interrupted"] == []
    metrics = json.loads((run_dir / "eval" / "step_0001" / "metrics.json").read_text())["metrics"]
    assert data["last_evaluation"]["step"] == 1 and data["last_evaluation"]["metrics"] == metrics
    assert [e["step"] for e in data["evaluations"]] == [0, 1]  # before training and after the iteration
    run_json = json.loads((run_dir / "run.json").read_text())
    assert data["mlflow"]["run_id"] == run_json["mlflow_run_id"]
    assert data["mlflow"]["tracking_uri"] == session_env["SOLRL_TEST_TRACKING_URI"]

    text = run_cli("status", "--run-dir", str(run_dir)).stdout
    assert "1 of 1 complete" in text and f"after 1 iteration: reward {metrics['reward']:.4f}" in text
    assert run_json["mlflow_run_id"] in text and str(run_dir) in text


def test_status_names_an_interrupted_stage(quiet_run, run_cli, tmp_path):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(quiet_run[0], run_dir, ignore=shutil.ignore_patterns(".lock"))
    (run_dir / "iter_0001" / "quantize.partial").mkdir(parents=True)  # a stage that died before its manifest
    data = json.loads(run_cli("status", "--run-dir", str(run_dir), "--json").stdout)
    assert data["interrupted"] == [{"iteration": 1, "stage": "quantize"}]
    assert data["completed_iterations"] == 1 and data["iterations"][1]["stages"]["quantize"] == "partial"
    assert "interrupted  : quantize of iteration 1" in run_cli("status", "--run-dir", str(run_dir)).stdout


def test_prefect_info_lines_only_with_verbose(quiet_run, session_env):
    env = {k: v for k, v in session_env.items() if not k.startswith(("PREFECT_LOGGING", "MLFLOW_LOGGING"))}
    run_dir = str(quiet_run[0])
    default = solrl(env, "stage", "select", "--run-dir", run_dir, "--iteration", "0", "--force")
    assert "| INFO" not in default.stderr, default.stderr
    verbose = solrl(env, "stage", "select", "--run-dir", run_dir, "--iteration", "0", "--force", "--verbose")
    assert "| INFO" in verbose.stderr and "Finished in state Completed" in verbose.stderr
