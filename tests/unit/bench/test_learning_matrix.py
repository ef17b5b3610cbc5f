"""The learning matrix (solrl_core/bench/matrix_config.py, matrix_report.py) on synthetic run directories: a cell's
config in its layers, the rise and its interval recomputed with scipy, the verdicts and their power, the per-seed
table, and the learning status `solrl presets` and `solrl train` read (solrl_core/config/learning_status.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats as scipy_stats

from repo_paths import ROOT
from solrl_core.bench.matrix_config import load_matrix_config, matrix_runs
from solrl_core.bench.matrix_report import build_report, status
from solrl_core.bench.stats import minimal_detectable
from solrl_core.config.learning_status import learning_label, learning_note, read_status, write_status
from solrl_core.config.loading import load_config
from solrl_core.config.schema import dump_config
from solrl_core.errors import ConfigError
from solrl_core.run.rundir import STAGES, RunDir, write_json_atomic

CONFIGS = ROOT / "configs"

# held-out value before training and after 2 and 4 iterations, per cell and seed
CURVES = {
    "image/diffusionnft/sol_rl": {0: [0.70, 0.74, 0.78], 1: [0.70, 0.73, 0.80], 2: [0.70, 0.76, 0.79]},
    "image/diffusionnft/baseline": {0: [0.70, 0.69, 0.66], 1: [0.70, 0.68, 0.67], 2: [0.70, 0.70, 0.65]},
    "image/flow_grpo/sol_rl": {0: [0.70, 0.72, 0.74], 1: [0.70, 0.66, 0.68], 2: [0.70, 0.71, 0.71]},
    "image/flow_grpo/baseline": {0: [0.70, 0.71, 0.73], 1: [0.70, 0.70, 0.72], 2: [0.70, 0.73, 0.74]},
}


@pytest.fixture
def matrix_file(tmp_path):
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump({
        "seeds": 3, "iterations": 4, "eval_every": 2,
        "worlds": {"image": {"base": str(CONFIGS / "demo.yaml"), "objectives": ["diffusionnft", "flow_grpo"],
                             "families": [str(CONFIGS / "families" / f"{f}.yaml") for f in ("baseline", "sol_rl")],
                             "overrides": {"prompts.per_iteration": 4}}},
        "objectives": {"flow_grpo": {"explore.steps": 10, "objective.flow_grpo.kl_weight": 0.0}},
        "run_root": str(tmp_path / "runs"),
    }))
    return path


def _fill(run, cell: str) -> None:
    """A finished synthetic run: its config, seven complete stages per iteration and its evaluations."""
    run_dir = RunDir(run.run_dir)
    run_dir.root.mkdir(parents=True)
    run_dir.config_path.write_text(dump_config(run.cfg))
    for i in range(4):
        for stage in STAGES:
            run_dir.complete(i, stage, {"seconds": 1.0, **({"mean": 0.5} if stage == "score_final" else {})})
    for step, value in zip((0, 2, 4), CURVES[cell][run.seed]):
        write_json_atomic(run_dir.root / "eval" / f"step_{step:04d}" / "metrics.json",
                          {"step": step, "metrics": {"reward": value, "embedded": value, "gold": value,
                                                     "embedded_learned": 2 * value}})


def test_a_cells_config_is_its_world_family_overrides_and_objective_in_layers(matrix_file):
    matrix, base = load_matrix_config(matrix_file)
    runs = matrix_runs(matrix, base)
    assert [r.key for r in runs[:4]] == ["image/diffusionnft/baseline-s0", "image/diffusionnft/sol_rl-s0",
                                         "image/flow_grpo/baseline-s0", "image/flow_grpo/sol_rl-s0"]
    assert [r.seed for r in runs] == [0] * 4 + [1] * 4 + [2] * 4  # seed-major
    sol = next(r.cfg for r in runs if r.key == "image/flow_grpo/sol_rl-s1")
    assert (sol.family, sol.objective.name, sol.seed, sol.iterations, sol.eval.every) == ("sol_rl", "flow_grpo", 1,
                                                                                           4, 2)
    assert sol.explore.steps == sol.regenerate.steps == 10 and sol.objective.flow_grpo.kl_weight == 0.0
    assert sol.prompts.per_iteration == 4 and sol.eval.gold == "embedded"  # the world's override, its base
    base_cfg = next(r.cfg for r in runs if r.key == "image/diffusionnft/baseline-s0")
    assert base_cfg.explore.precision == "fp32" and base_cfg.select.mode == "all"  # the family file's own keys
    assert next(r for r in runs if r.key == "image/diffusionnft/sol_rl-s2").run_dir.parts[-3:] == (
        "image", "diffusionnft", "sol_rl-s2")


@pytest.mark.parametrize("keys, message", [
    ({"worlds": {}}, "name at least one world"),
    ({"worlds": {"image": {"base": "demo.yaml", "objectives": [], "families": ["families/sol_rl.yaml"]}}},
     "name at least one objective and one family"),
    ({"objectives": {"awm": {"seed": 3}}}, "'seed' is set by the matrix itself"),
    ({"seedz": 3}, "unknown key 'seedz'"),
])
def test_bad_matrix_configs_are_one_line_errors(matrix_file, keys, message):
    data = {**yaml.safe_load(matrix_file.read_text()), **keys}
    matrix_file.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=message):
        load_matrix_config(matrix_file)


def test_report_numbers_recompute_from_the_per_seed_values(matrix_file, tmp_path):
    matrix, base = load_matrix_config(matrix_file)
    runs = matrix_runs(matrix, base)
    for run in runs:
        _fill(run, run.cell)
    report = build_report(runs, matrix, tmp_path / "report", command="solrl matrix m.yaml")
    cells = report["cells"]
    for name, curves in CURVES.items():
        rises = np.array([c[-1] - c[0] for c in curves.values()])
        c = cells[name]
        assert c["rise"]["value"] == pytest.approx(rises.mean())
        lo, hi = scipy_stats.t.interval(0.95, len(rises) - 1, loc=rises.mean(), scale=scipy_stats.sem(rises))
        assert (c["rise"]["lo"], c["rise"]["hi"]) == (pytest.approx(lo), pytest.approx(hi))
        expected = "rises" if lo > 0 else "falls" if hi < 0 else "cannot tell"
        assert c["verdict"] == expected and c["key"] == "gold" and c["start"] == pytest.approx(0.70)
        sd = rises.std(ddof=1)
        power = scipy_stats.nct.sf(scipy_stats.t.ppf(0.975, 2), 2, c["minimal_detectable"] / (sd / math.sqrt(3)))
        assert power == pytest.approx(0.8, abs=0.06)  # the normal-shift approximation of the t test's power
        assert c["metrics"]["embedded_learned"]["rise"]["value"] == pytest.approx(2 * rises.mean())
    assert {n: c["verdict"] for n, c in cells.items()} == {
        "image/diffusionnft/baseline": "falls", "image/diffusionnft/sol_rl": "rises",
        "image/flow_grpo/baseline": "rises", "image/flow_grpo/sol_rl": "cannot tell"}
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| image | diffusionnft | sol_rl | 3 | 4 |" in text and "**rises**" in text and "**falls**" in text
    assert "| 1 | 0.7000 | 0.8000 | +0.1000 |" in text  # seed 1 of sol_rl in the per-seed table
    assert (tmp_path / "report" / "plots" / "image.png").stat().st_size > 0
    on_disk = json.loads((tmp_path / "report" / "report.json").read_text())
    assert on_disk["cells"]["image/diffusionnft/sol_rl"]["verdict"] == "rises"
    entries = status(report, "m.yaml")
    assert entries["image/diffusionnft/sol_rl"]["verdict"] == "rises" and entries["image/diffusionnft/sol_rl"][
        "seeds"] == 3
    write_status(tmp_path / "status.yaml", entries, "solrl matrix m.yaml")
    assert read_status(tmp_path / "status.yaml") == json.loads(json.dumps(entries))


def test_minimal_detectable_rise_grows_with_the_spread_and_falls_with_seeds():
    assert minimal_detectable(0.02, 3) > minimal_detectable(0.02, 8) > 0
    assert minimal_detectable(0.04, 5) == pytest.approx(2 * minimal_detectable(0.02, 5))
    assert math.isnan(minimal_detectable(0.02, 1))


def test_the_learning_status_names_a_configs_cell_and_says_when_it_is_experimental():
    status_table = {"image/diffusionnft/sol_rl": {"verdict": "rises", "rise": 0.07, "interval": [0.05, 0.09],
                                                  "seeds": 3, "iterations": 24, "metric": "gold"},
                    "image/flow_grpo/naive_quant": {"verdict": "cannot tell", "rise": 0.01,
                                                    "interval": [-0.02, 0.04], "seeds": 3, "iterations": 24,
                                                    "metric": "gold"}}
    demo = load_config(CONFIGS / "demo.yaml")
    assert learning_note(demo, status_table) is None and learning_label(status_table["image/diffusionnft/sol_rl"]) \
        == "rises"
    quant = load_config(CONFIGS / "families" / "naive_quant.yaml", ["objective.name=flow_grpo", "explore.steps=10"])
    note = learning_note(quant, status_table)
    assert note.startswith("image/flow_grpo/naive_quant is experimental") and "+0.0100 [-0.0200, +0.0400]" in note
    video = load_config(CONFIGS / "demo_video.yaml", ["objective.name=awm"])
    assert "video/awm/sol_rl is experimental: the learning matrix has not trained" in learning_note(video, status_table)
    wan = load_config(CONFIGS / "presets" / "flow_grpo" / "wan_sol_rl_pickscore.yaml")
    assert learning_note(wan, status_table).startswith("video/flow_grpo/sol_rl")
    # an editing model is the edit world's cell, whatever the image cell of its family measured
    for kind in ("flux1-kontext", "embedded_edit"):
        kontext = load_config(CONFIGS / "presets" / "flux1_sol_rl_pickscore.yaml", [f"model.kind={kind}"])
        assert learning_note(kontext, status_table).startswith("edit/diffusionnft/sol_rl is experimental")


def test_the_shipped_status_agrees_with_the_committed_report():
    """configs/measured/learning_status.yaml is what `solrl matrix ... --status` writes from the committed reports
    (docs/learning-matrix/report.json, and a world's trained apart, docs/learning-matrix/<world>/report.json, which
    replaces that world's cells of the main report): each cell's verdict recomputes from its report's per-seed rises."""
    shipped = read_status()
    folder = ROOT / "docs" / "learning-matrix"
    apart = {}
    for path in sorted(folder.glob("*/report.json")):
        found = json.loads(path.read_text())["cells"]
        assert not set(found) & set(apart), path  # each cell in one report trained apart
        apart.update(found)
    # a world trained apart, later, replaces the main report's cells of that world (the video world on the video model
    # shipped since: docs/learning-matrix/report.md notes it)
    cells = {**json.loads((folder / "report.json").read_text())["cells"], **apart}
    assert set(shipped) == set(cells)
    for name, entry in shipped.items():
        per_seed = cells[name]["per_seed"]
        key = cells[name]["key"]
        rises = np.array([d["final"][key] - d["start"][key] for d in per_seed.values()])
        lo, hi = scipy_stats.t.interval(0.95, len(rises) - 1, loc=rises.mean(), scale=scipy_stats.sem(rises))
        assert entry["verdict"] == ("rises" if lo > 0 else "falls" if hi < 0 else "cannot tell"), name
        assert entry["rise"] == pytest.approx(rises.mean(), abs=1e-4) and entry["seeds"] == len(rises)
