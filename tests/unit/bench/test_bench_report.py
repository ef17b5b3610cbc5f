"""The benchmark report on synthetic run directories (numbers checked by hand), the bench config, the audit's
numbers on hand-made arrays."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import optimize, stats as scipy_stats

from repo_paths import ROOT
from solrl_core.bench.bench_config import BenchRun, bench_runs, load_bench_config
from solrl_core.bench.report import build_report, first_reaching
from solrl_core.config.schema import dump_config
from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.run.rundir import STAGES, RunDir, write_json_atomic
from solrl_core.stages.audit import audit_due, audit_numbers, extremes_overlap

FAMILIES = ROOT / "configs" / "families"

# Eval reward after s = 0..4 iterations, per family and seed.
REWARDS = {
    "baseline": {0: [0.10, 0.20, 0.30, 0.40, 0.50], 1: [0.10, 0.22, 0.28, 0.42, 0.54]},
    "naive_scaling": {0: [0.10, 0.25, 0.45, 0.55, 0.60], 1: [0.10, 0.25, 0.45, 0.55, 0.60]},
    "naive_quant": {0: [0.10, 0.15, 0.20, 0.25, 0.30], 1: [0.10, 0.15, 0.20, 0.25, 0.30]},
    "sol_rl": {0: [0.10, 0.30, 0.50, 0.60, 0.62], 1: [0.10, 0.30, 0.56, 0.60, 0.64]},
}
GPU_S = {"baseline": 10.0, "naive_scaling": 40.0, "naive_quant": 20.0, "sol_rl": 8.0}  # per iteration
EXPLORE_S = {"baseline": 3.0, "naive_scaling": 12.0, "naive_quant": 16.0, "sol_rl": 10.0}
REGEN_S = {"sol_rl": 5.0}


def fake_pricer(cfg, precision, steps):
    total = GPU_S[cfg.family]
    return {"explore": total / 2, "regenerate": 0.0, "update": total / 2, "iteration": total}


fake_pricer.title = "fake pricer"


def make_run(root: Path, family: str, seed: int, rewards: dict | None = None) -> BenchRun:
    cfg = load_config(FAMILIES / f"{family}.yaml", [f"seed={seed}", "iterations=4"])
    run = RunDir(root / f"{family}-s{seed}")
    run.root.mkdir(parents=True)
    run.config_path.write_text(dump_config(cfg))
    for i in range(4):
        for stage in STAGES:
            seconds = {"explore": EXPLORE_S[family], "regenerate": REGEN_S.get(family, 1.0)}.get(stage, 1.0)
            if stage == "update":
                seconds += seed  # seed 1 is one second slower per iteration
            summary = {"seconds": seconds}
            if stage == "explore":
                summary.update(precision="fp32" if family in ("baseline", "naive_scaling") else "nvfp4_emulated",
                               steps=cfg.explore.steps)
            if stage == "score_final":
                summary["mean"] = 0.5
                if family == "sol_rl":
                    summary.update(fidelity_spearman=0.8 + 0.01 * i, fidelity_kendall=0.6,
                                   fidelity_spearman_within_prompt=0.7, fidelity_kendall_within_prompt=0.5,
                                   fidelity_n_prompt_groups=4.0)
            run.complete(i, stage, summary)
        if family == "sol_rl" and i in (1, 3):
            run.complete(i, "audit", {"spearman_within_prompt": 0.96 if i == 1 else 0.92, "kendall_within_prompt": 0.7,
                                      "spearman_pooled": 0.9, "kendall_pooled": 0.75, "topk_overlap": 0.5,
                                      "bottomk_overlap": 1.0, "explore_precision": "nvfp4_emulated",
                                      "explore_steps": 6, "seconds": 3.0})
    for step, reward in enumerate((rewards or REWARDS)[family][seed]):
        write_json_atomic(run.root / "eval" / f"step_{step:04d}" / "metrics.json",
                          {"step": step, "metrics": {"reward": reward, "embedded": reward}})
    return BenchRun(cfg.name, seed, cfg, run.root)


@pytest.fixture
def bench_cfg(tmp_path):
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump({
        "families": [str(FAMILIES / f"{f}.yaml") for f in REWARDS],
        "iterations": 4, "seeds": 2, "eval_every": 1, "audit_every": 2, "target_gain": 0.42,
    }))
    return load_bench_config(path)[0]


def test_report_numbers_by_hand(tmp_path, bench_cfg):
    runs = [make_run(tmp_path / "bench", f, s) for s in (0, 1) for f in REWARDS]
    def alt_pricer(cfg, precision, steps):  # another backbone: sol_rl twice as dear per iteration
        return {"iteration": GPU_S[cfg.family] * (2 if cfg.family == "sol_rl" else 1)}

    alt_pricer.title = "alt"
    report = build_report(runs, bench_cfg, tmp_path / "bench", pricer=fake_pricer, command="solrl bench test",
                          alternatives={"alt": alt_pricer})
    fams = report["families"]

    # target = baseline's value before training + the pre-registered gain: 0.10 + 0.42
    assert report["target"] == pytest.approx(0.52)
    # final rewards with the spread over seeds (sample std)
    assert fams["sol_rl"]["final_reward"] == pytest.approx(0.63)
    assert fams["sol_rl"]["final_reward_std"] == pytest.approx(np.std([0.62, 0.64], ddof=1))
    assert fams["sol_rl"]["final_reward_min"] == pytest.approx(0.62)
    assert fams["naive_scaling"]["final_reward_std"] == pytest.approx(0.0)

    # time to target. seed-mean curves: sol_rl [.1 .3 .53 .6 .63] -> step 2; baseline [.1 .21 .29 .41 .52] ->
    # step 4; naive_scaling [.1 .25 .45 .55 .6] -> step 3; naive_quant never.
    t = {f: fams[f]["time_to_target"] for f in fams}
    assert [t[f]["iteration"]["step"] for f in ("sol_rl", "baseline", "naive_scaling")] == [2, 4, 3]
    assert t["sol_rl"]["gpu"]["cost"] == pytest.approx(2 * 8.0)
    assert t["baseline"]["gpu"]["cost"] == pytest.approx(4 * 10.0)
    assert t["naive_scaling"]["gpu"]["cost"] == pytest.approx(3 * 40.0)
    assert t["sol_rl"]["gpu"]["speedup"]["baseline"] == pytest.approx(40.0 / 16.0)
    assert t["sol_rl"]["gpu"]["speedup"]["naive_scaling"] == pytest.approx(120.0 / 16.0)
    assert t["naive_scaling"]["gpu"]["speedup"]["baseline"] == pytest.approx(40.0 / 120.0)
    assert t["naive_quant"]["gpu"]["cost"] is None and t["naive_quant"]["gpu"]["speedup"]["baseline"] is None
    # measured CPU seconds per iteration: 5 stages x 1 s + explore + regenerate + seed (update); seed-mean of cumsum
    sol_it = [5 + 10 + 5 + s for s in (0, 1)]
    dnft_it = [3 + 6 * 1 + s for s in (0, 1)]  # explore 3, the other six stages 1 each
    assert t["sol_rl"]["cpu"]["cost"] == pytest.approx(np.mean([2 * x for x in sol_it]))
    assert t["baseline"]["cpu"]["cost"] == pytest.approx(np.mean([4 * x for x in dnft_it]))
    assert t["sol_rl"]["cpu"]["speedup"]["baseline"] == pytest.approx(
        np.mean([4 * x for x in dnft_it]) / np.mean([2 * x for x in sol_it]))
    assert fams["sol_rl"]["cpu_seconds_per_iteration"]["iteration"] == pytest.approx(np.mean(sol_it))
    assert fams["sol_rl"]["gpu_seconds_per_iteration"]["iteration"] == pytest.approx(8.0)

    alt = report["alternative_costs"]["alt"]
    assert alt["gpu_seconds_per_iteration"]["sol_rl"] == pytest.approx(16.0)
    assert alt["speedup"]["sol_rl"]["baseline"] == pytest.approx(40.0 / (2 * 16.0))
    assert fams["sol_rl"]["gpu_seconds_per_iteration"]["iteration"] == pytest.approx(8.0)  # the main axis untouched

    # fidelity per iteration and the audits
    assert [r["spearman"] for r in report["fidelity_selected"]["sol_rl"]] == pytest.approx([0.80, 0.81, 0.82, 0.83])
    assert list(report["fidelity_selected"]) == ["sol_rl"]
    assert [a["iteration"] for a in report["audits"]["sol_rl"]] == [1, 3]

    # per seed, target 0.52: sol_rl reaches it at step 3 (seed 0) and 2 (seed 1); baseline seed 0 never
    # (censored at its last cost, 4 iterations) and seed 1 at step 4; naive_quant never
    st = {f: fams[f]["statistics"] for f in fams}
    ttt = st["sol_rl"]["time_to_target"]
    assert {s: v["value"] for s, v in ttt["iteration"]["per_seed"].items()} == {"0": 3.0, "1": 2.0}
    assert ttt["gpu"]["value"] == pytest.approx(8.0 * 2.5) and ttt["gpu"]["censored"] == 0
    dn = st["baseline"]["time_to_target"]["gpu"]
    assert dn["per_seed"]["0"] == {"value": pytest.approx(40.0), "censored": True} and dn["censored"] == 1
    assert st["naive_quant"]["time_to_target"]["iteration"]["censored"] == 2
    assert st["sol_rl"]["final_reward"]["value"] == pytest.approx(0.63)
    pair = next(p for p in report["pairs"] if (p["a"], p["b"]) == ("baseline", "sol_rl"))
    # sol_rl's speed-up over baseline, paired: mean(40, 40) / mean(24, 16), a lower bound (baseline censored)
    assert pair["speedup"]["gpu"]["value"] == pytest.approx(0.5)
    assert pair["final_reward_diff"]["value"] == pytest.approx(np.mean([0.50 - 0.62, 0.54 - 0.64]))
    claims = {c["claim"]: c for c in report["claims"]}
    speed = next(c for k, c in claims.items() if "3x" in k)
    assert speed["estimate"]["value"] == pytest.approx(2.0) and "lower bound" in speed["detail"]
    scaling = next(c for k, c in claims.items() if "naive_scaling" in k)
    assert scaling["estimate"]["value"] == pytest.approx(0.03)
    assert next(c for k, c in claims.items() if "spearman" in k)["estimate"]["value"] == pytest.approx(0.94)
    # two seeds are below MIN_SEEDS: no verdict either way
    assert {c["verdict"] for c in report["claims"]} == {"cannot tell at this power"} and len(claims) == 6

    # files: markdown with its sections, JSON, non-empty PNGs
    md = (tmp_path / "bench" / "report.md").read_text()
    for section in ("## Final held-out evaluation reward", "## Time to target", "## Cost per iteration",
                    "## Ranking fidelity", "### Full-fidelity audit", "## Protocol (full)", "## Statistics over training seeds",
                    "## Verdicts", "## Runs"):
        assert section in md, section
    assert "| sol_rl | 2 | " in md and "2.50×" in md and "7.50×" in md
    half = scipy_stats.t.ppf(0.975, 1) * np.std([0.50, 0.54], ddof=1) / math.sqrt(2)  # t interval of 2 seeds
    assert (f"| baseline | 2 | 0.5200 [{0.52 - half:.4f}, {0.52 + half:.4f}] | > 4.0 [4.0, > 4.0] (1/2 censored) |"
            in md)  # both seeds at 4 iterations: no spread, a point interval
    assert "| alt | 1.00×, 1.00× | 4.00×, 0.33× | 2.00×, – | 1.60×, 1.25× |" in md
    assert json.loads((tmp_path / "bench" / "report.json").read_text())["target"] == pytest.approx(0.52)
    pngs = sorted((tmp_path / "bench" / "plots").glob("*.png"))
    assert {p.name for p in pngs} == {"eval_vs_iteration.png", "eval_vs_cpu_seconds.png", "eval_vs_gpu_cost.png",
                                      "fidelity.png", "cost_per_iteration.png"}
    for p in pngs:
        assert p.stat().st_size > 1000 and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert all(Path(f).is_file() for f in report["files"])


def test_reference_that_never_reaches_gives_a_lower_bound():
    assert first_reaching([0, 1, 2], [0.1, 0.2, math.nan], [0, 5, 10], 0.2) == {"step": 1, "cost": 5.0}
    assert first_reaching([0, 1], [0.1, 0.15], [0, 5], 0.2) is None
    from solrl_core.bench.report import time_to_target

    curves = {"a": {"steps": [0, 1, 2], "reward": [0.0, 0.5, 0.6], **{f"cost_{x}": [0, 10, 20] for x in
                                                                        ("iteration", "cpu", "gpu")}},
              "b": {"steps": [0, 1, 2], "reward": [0.0, 0.1, 0.2], **{f"cost_{x}": [0, 30, 60] for x in
                                                                        ("iteration", "cpu", "gpu")}}}
    out = time_to_target(curves, 0.5, ["b"])
    assert out["a"]["gpu"]["speedup"]["b"] == pytest.approx(60 / 10)
    assert out["a"]["gpu"]["speedup_kind"]["b"] == "lower_bound"
    assert out["b"]["gpu"]["speedup"]["b"] is None


def test_bench_config_is_strict_and_resolves_runs(tmp_path):
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump({"families": [str(FAMILIES / "sol_rl.yaml"), str(FAMILIES / "baseline.yaml")],
                                    "iterations": 3, "seeds": 2, "eval_every": 1, "audit_every": 2,
                                    "overrides": {"prompts.per_iteration": 2, "train.lora_rank": 4}}))
    bench, base = load_bench_config(path)
    runs = bench_runs(bench, base, tmp_path / "out")
    assert [r.key for r in runs] == ["sol_rl-s0", "baseline-s0", "sol_rl-s1", "baseline-s1"]
    by = {r.key: r for r in runs}
    assert by["sol_rl-s1"].cfg.seed == 1 and by["sol_rl-s1"].cfg.iterations == 3
    assert by["sol_rl-s0"].cfg.audit.every == 2 and by["baseline-s0"].cfg.audit.every == 0  # fp32 10 steps
    assert all(r.cfg.prompts.per_iteration == 2 and r.cfg.train.lora_rank == 4 and r.cfg.eval.every == 1
               for r in runs)
    assert by["baseline-s1"].run_dir == tmp_path / "out" / "baseline-s1"
    with pytest.raises(ConfigError, match="unknown key 'cost.gpux'"):
        load_bench_config(path, ["cost.gpux=h100"])
    with pytest.raises(ConfigError, match="unknown key 'bogus'"):
        load_bench_config(path, ["bogus=1"])
    with pytest.raises(ConfigError, match="'seed' is set by the benchmark"):
        load_bench_config(path, ["overrides={seed: 3}"])
    with pytest.raises(ConfigError, match="missing key 'iterations'"):
        _without(path, "iterations", tmp_path)
    bad, base = load_bench_config(path, ["cost.gpu=h1000"])
    with pytest.raises(SolrlError, match="h1000"):
        bench_runs(bad, base)
    bad, base = load_bench_config(path, ["baseline=naive_scaling"])
    with pytest.raises(ConfigError, match="baseline: 'naive_scaling'"):
        bench_runs(bad, base)
    shipped, base = load_bench_config(ROOT / "configs" / "bench_families.yaml")
    assert {r.cfg.family for r in bench_runs(shipped, base)} == {"baseline", "naive_scaling", "naive_quant",
                                                                 "sol_rl"}


def _without(path: Path, key: str, tmp_path: Path):
    data = yaml.safe_load(path.read_text())
    data.pop(key)
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(data))
    return load_bench_config(other)


def test_audit_numbers_by_hand():
    # one group of 6: proxy ranks 0..5 ascending; full swaps the two best and moves candidate 2 to the top
    proxy = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    full = np.array([0.0, 1.0, 9.0, 3.0, 5.0, 4.0])
    prompt = np.zeros(6, dtype=int)
    ov = extremes_overlap(proxy, full, prompt, half=2)
    # top-2 proxy {5, 4}, top-2 full {2, 4} -> 1/2; bottom-2 proxy {0, 1}, full {0, 1} -> 1
    assert ov == {"topk_overlap": 0.5, "bottomk_overlap": 1.0}
    out = audit_numbers(proxy, full, prompt, k=4, selected=np.array([0, 1, 4, 5]))
    assert out["k_half"] == 2 and out["candidates"] == 6 and out["prompts"] == 1
    from scipy import stats

    assert out["spearman_within_prompt"] == pytest.approx(stats.spearmanr(proxy, full).statistic)
    assert out["kendall_pooled"] == pytest.approx(stats.kendalltau(proxy, full).statistic)
    sel = [0, 1, 4, 5]
    assert out["selected"]["spearman"] == pytest.approx(stats.spearmanr(proxy[sel], full[sel]).statistic)


def test_audit_due():
    cfg = load_config(FAMILIES / "sol_rl.yaml", ["audit.every=3"])
    assert [i for i in range(9) if audit_due(cfg, i)] == [2, 5, 8]
    assert not any(audit_due(load_config(FAMILIES / "sol_rl.yaml"), i) for i in range(9))


def test_orchestration_overhead_is_the_wall_time_no_stage_evaluation_or_audit_took():
    from solrl_core.bench.report import RunHistory, _orchestration_overhead, overhead_summary

    hist = RunHistory("x", 0, Path("."), None)
    # updates complete at t = 100, 120, 150; stages take 15 and 20 s; step 1's evaluation 3 s; iteration 2's audit 4 s
    for i, (done, stages) in enumerate([(100.0, 30.0), (120.0, 15.0), (150.0, 20.0)]):
        hist.iterations.append({"iteration": i, "completed_at": done, "cpu_seconds": stages})
    hist.eval_seconds = {0: 50.0, 1: 3.0}
    hist.audits = {2: {"seconds": 4.0}}
    _orchestration_overhead(hist)
    assert "overhead_seconds" not in hist.iterations[0]  # no start mark for the first iteration
    assert hist.iterations[1]["overhead_seconds"] == pytest.approx(20 - 15 - 3)
    assert hist.iterations[2]["overhead_seconds"] == pytest.approx(30 - 20 - 4)
    summary = overhead_summary([hist])
    assert summary["iterations"] == 2 and summary["seconds"] == pytest.approx(4.0)
    assert summary["fraction"] == pytest.approx(8 / 50)


def test_the_evaluations_noise_and_what_the_benchmark_resolves(tmp_path, bench_cfg):
    """Each evaluation's standard error from its seed blocks (every prompt's j-th seed), and per pair of families the
    spread of the per-seed final differences, the difference those seeds detect 80% of the time, and the seeds that
    would resolve 1% of the second family's final value."""
    runs = [make_run(tmp_path / "bench", f, s) for s in (0, 1) for f in REWARDS]
    blocks = [0.50, 0.54, 0.47, 0.53]  # four seed blocks around each evaluation's mean
    for path in (tmp_path / "bench").glob("*/eval/step_*/metrics.json"):
        data = json.loads(path.read_text())
        mean = data["metrics"]["reward"]
        data["seed_blocks"] = {"reward": [mean + b - np.mean(blocks) for b in blocks]}
        write_json_atomic(path, data)
    report = build_report(runs, bench_cfg, tmp_path / "bench", pricer=fake_pricer)
    se = np.std(blocks, ddof=1) / 2
    assert report["eval_noise"]["standard_error"] == pytest.approx(se)
    row = next(r for r in report["resolution"] if (r["a"], r["b"]) == ("baseline", "sol_rl"))
    diffs = np.array([0.50 - 0.62, 0.54 - 0.64])
    sd = np.std(diffs, ddof=1)
    assert row["sd"] == pytest.approx(sd) and row["margin"] == pytest.approx(0.01 * 0.63)
    quantiles = scipy_stats.t.ppf(0.975, 1) + scipy_stats.t.ppf(0.8, 1)
    assert row["detectable"] == pytest.approx(quantiles * sd / math.sqrt(2))
    assert row["eval_noise_share"] == pytest.approx(2 * se ** 2 / sd ** 2)
    need = row["seeds_for_effect"]
    detect = lambda n: (scipy_stats.t.ppf(0.975, n - 1) + scipy_stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)  # noqa
    assert detect(need) <= 0.01 * 0.63 < detect(need - 1)
    md = (tmp_path / "bench" / "report.md").read_text()
    assert "## What this benchmark can resolve" in md and f"standard error of {se:.4f}" in md
    assert f"| baseline | sol_rl | " in md and f"~{need} (±{0.01 * 0.63:.4f})" in md


def test_families_are_ranked_on_the_gold_evaluator_when_runs_have_one(tmp_path, bench_cfg):
    runs = [make_run(tmp_path / "bench", f, s) for s in (0, 1) for f in REWARDS]
    for path in (tmp_path / "bench").glob("*/eval/step_*/metrics.json"):
        data = json.loads(path.read_text())
        data["metrics"]["gold"] = data["metrics"]["reward"] - 0.1  # a learned reward above the gold one
        write_json_atomic(path, data)
    report = build_report(runs, bench_cfg, tmp_path / "bench", pricer=fake_pricer)
    assert report["eval_key"] == "gold"
    assert report["target"] == pytest.approx(0.52 - 0.1)  # baseline's gold start 0.0 + 0.42
    assert report["families"]["sol_rl"]["statistics"]["final_reward"]["value"] == pytest.approx(0.63 - 0.1)
    assert "value compared: `gold`" in (tmp_path / "bench" / "report.md").read_text()


# Five seeds, so that the verdicts decide: eval reward after s = 0..4 iterations per family and seed.
FIVE_SEEDS = {
    "baseline": {s: [0.10, 0.20, 0.30, 0.50 + 0.02 * s, 0.54 + 0.005 * (s - 2)] for s in range(5)},
    "naive_scaling": {s: [0.10, 0.25, 0.45, 0.55, f] for s, f in enumerate([0.60, 0.615, 0.62, 0.625, 0.64])},
    "naive_quant": {s: [0.10, 0.15, 0.20, 0.25, f] for s, f in enumerate([0.70, 0.71, 0.72, 0.74, 0.75])},
    "sol_rl": {s: [0.10, 0.50 if s == 4 else 0.55, 0.60, 0.60, 0.61 + 0.01 * s] for s in range(5)},
}


def _per_seed_tables(md: str) -> dict[str, dict[int, list[str]]]:
    """The report's per-seed tables: family -> seed -> the row's cells after the seed."""
    section = md.split("## Per-seed numbers", 1)[1].split("\n## ", 1)[0]
    tables, family = {}, None
    for line in section.splitlines():
        if line.startswith("**") and line.endswith("**"):
            family = line.strip("*")
            tables[family] = {}
        elif family and line.startswith("| ") and line[2].isdigit():
            cells = [c.strip() for c in line.strip("|").split("|")]
            tables[family][int(cells[0])] = cells[1:]
    return tables


def _t_interval(values):
    v = np.asarray(values, dtype=float)
    if np.std(v) == 0:
        return float(v.mean()), float(v.mean())
    return scipy_stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=scipy_stats.sem(v))


def _fieller_by_root_finding(x, y):
    """The ends of {theta : the paired t-test of x - theta y does not reject at 5%}, found numerically."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    centre = x.mean() / y.mean()
    gap = lambda th: scipy_stats.ttest_1samp(x - th * y, 0.0).pvalue - 0.05  # noqa: E731
    return optimize.brentq(gap, 1e-6, centre), optimize.brentq(gap, centre, 1e3 * centre)


def test_verdicts_recompute_from_the_per_seed_table_alone(tmp_path):
    """Item 3 of the protocol: every verdict of report.md follows from its per-seed table, recomputed here with
    scipy (t intervals; Fieller's interval by root-finding the paired t-test), without the report's code."""
    runs = [make_run(tmp_path / "bench", f, s, FIVE_SEEDS) for s in range(5) for f in FIVE_SEEDS]
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump({"families": [str(FAMILIES / f"{f}.yaml") for f in FIVE_SEEDS],
                                    "iterations": 4, "seeds": 5, "eval_every": 1, "audit_every": 2,
                                    "target_gain": 0.44}))  # 0.10 + 0.44: baseline's final mean
    build_report(runs, load_bench_config(path)[0], tmp_path / "bench", pricer=fake_pricer)
    md = (tmp_path / "bench" / "report.md").read_text()
    table = _per_seed_tables(md)
    assert set(table) == set(FIVE_SEEDS) and all(len(rows) == 5 for rows in table.values())
    final = {f: [float(rows[s][0]) for s in range(5)] for f, rows in table.items()}
    assert final["sol_rl"] == pytest.approx([0.61, 0.62, 0.63, 0.64, 0.65])

    def gpu(f):  # GPU-s to target per seed and whether any seed is censored ("> ")
        cells = [table[f][s][3] for s in range(5)]
        return [float(c.lstrip("> ")) for c in cells], any(c.startswith(">") for c in cells)

    recomputed = {}
    (num, num_censored), (den, den_censored) = gpu("baseline"), gpu("sol_rl")
    lo, hi = _fieller_by_root_finding(num, den)
    recomputed["3x"] = ("holds" if lo >= 3 and not den_censored else
                        "does not hold" if hi < 3 and not num_censored else "cannot tell at this power")
    for key, other in (("naive_quant", "naive_quant"), ("above baseline", "baseline")):
        lo, hi = _t_interval(np.subtract(final["sol_rl"], final[other]))
        recomputed[key] = "holds" if lo > 0 else "does not hold" if hi <= 0 else "cannot tell at this power"
    bound = 0.01 * np.mean(final["naive_scaling"])  # no more than 1% of naive_scaling's final value below it
    lo, hi = _t_interval(np.subtract(final["sol_rl"], final["naive_scaling"]))
    recomputed["naive_scaling"] = ("holds" if lo >= -bound else "does not hold" if hi < -bound else
                                   "cannot tell at this power")
    for key, column, bar in (("spearman", 4, 0.93), ("kendall", 5, 0.80)):
        lo, hi = _t_interval([float(table["sol_rl"][s][column]) for s in range(5)])
        recomputed[key] = "holds" if lo >= bar else "does not hold" if hi < bar else "cannot tell at this power"

    verdicts = {}
    for line in md.split("## Verdicts", 1)[1].splitlines():
        if line.startswith("| ") and "**" in line:
            claim, verdict = line.split("|")[1], line.rsplit("**", 2)[1]
            key = next(k for k in recomputed if k in claim)
            verdicts[key] = verdict
    assert verdicts == recomputed
    assert {"holds", "does not hold"} <= set(verdicts.values())  # the constructed seeds decide both ways
