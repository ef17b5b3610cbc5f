"""End to end through the CLI and the loopback Prefect server: `solrl matrix` on a tiny matrix (the image world, two
objectives x two families, 1 seed, 1 iteration), then one cell again alone (`--cell`), the report and the status
file it writes, and `--report-only`."""

from __future__ import annotations

import json

import pytest
import yaml

from repo_paths import ROOT
from solrl_core.config.learning_status import read_status

# N and K as the smaller run's (tests/support/cli_processes.py SMALLER_SETS); the baseline family trains on all N
SMALL = {"prompts.per_iteration": 2, "explore.seeds_per_prompt": 4, "select.k": 2, "explore.batch_size": 48,
         "regenerate.batch_size": 48, "train.lora_rank": 4, "train.lora_alpha": 8, "eval.num_prompts": 2,
         "eval.seeds_per_prompt": 2, "eval.steps": 2, "eval.batch_size": 8, "tracking.grid_prompts": 0}


@pytest.fixture(scope="module")
def matrix(session_env, tmp_path_factory):
    from cli_processes import solrl

    base = tmp_path_factory.mktemp("matrix")
    config = base / "matrix.yaml"
    config.write_text(yaml.safe_dump({
        "name": "tinymatrix", "seeds": 1, "iterations": 1, "eval_every": 1,
        "worlds": {"image": {"base": str(ROOT / "configs" / "demo.yaml"), "objectives": ["diffusionnft", "awm"],
                             "families": [str(ROOT / "configs" / "families" / f"{f}.yaml")
                                          for f in ("baseline", "sol_rl")],
                             "overrides": {**SMALL, "explore.steps": 3, "regenerate.steps": 3}}},
        "objectives": {"diffusionnft": {}, "awm": {"objective.awm.times_per_sample": 2}},  # 2 strata of 3 steps
        "tracking": {"uri": session_env["SOLRL_TEST_TRACKING_URI"], "experiment": "solrl-matrix-test"},
    }))
    out = base / "out"
    first = solrl(session_env, "matrix", str(config), "--run-dir", str(out), "--no-progress",
                  "--cell", "image/diffusionnft/*", "--cell", "image/awm/sol_rl")
    again = solrl(session_env, "matrix", str(config), "--run-dir", str(out), "--no-progress",
                  "--status", str(base / "status.yaml"))
    return config, out, first, again, base


def test_the_cells_asked_for_train_first_and_the_rest_later(matrix):
    config, out, first, again, base = matrix
    assert first.returncode == 0, first.stderr[-2000:]
    assert "3 runs of 4" in first.stdout  # awm/baseline was not asked for
    assert again.returncode == 0, again.stderr[-2000:]
    assert "4 runs of 4" in again.stdout
    for cell in ("diffusionnft/baseline", "diffusionnft/sol_rl", "awm/baseline", "awm/sol_rl"):
        run = out / "image" / cell.split("/")[0] / f"{cell.split('/')[1]}-s0"
        assert (run / "eval" / "step_0001" / "metrics.json").is_file(), cell


def test_the_report_and_the_status_it_writes(matrix):
    config, out, _, again, base = matrix
    report = json.loads((out / "report.json").read_text())
    assert set(report["cells"]) == {"image/diffusionnft/baseline", "image/diffusionnft/sol_rl",
                                    "image/awm/baseline", "image/awm/sol_rl"}
    cell = report["cells"]["image/awm/sol_rl"]
    per_seed = cell["per_seed"]["0"]
    assert cell["rise"]["value"] == pytest.approx(per_seed["final"]["gold"] - per_seed["start"]["gold"])
    assert cell["verdict"] == "cannot tell"  # one seed: no interval
    assert "# Learning matrix `tinymatrix`" in (out / "report.md").read_text()
    status = read_status(base / "status.yaml")
    assert status["image/awm/sol_rl"]["verdict"] == "cannot tell" and status["image/awm/sol_rl"]["seeds"] == 1
    assert "status        : " in again.stdout and "learning matrix 'tinymatrix'" in again.stdout


def test_report_only_and_a_cell_that_matches_nothing(matrix, session_env):
    from cli_processes import assert_one_line_error, solrl

    config, out, _, _, _ = matrix
    proc = solrl(session_env, "matrix", str(config), "--run-dir", str(out), "--report-only")
    assert proc.returncode == 0 and "4 runs of 4" in proc.stdout
    proc = solrl(session_env, "matrix", str(config), "--run-dir", str(out), "--cell", "video/*", check=False)
    assert_one_line_error(proc, "--cell video/* matches no cell of the matrix (cells: image/diffusionnft/baseline")
