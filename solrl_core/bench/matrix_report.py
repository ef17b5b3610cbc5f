"""The learning matrix's report: whether each cell (world × objective × family) rises on its held-out evaluation, with
a 95% interval over training seeds, the per-seed numbers behind it, the curves, and the status `solrl presets` and
`solrl train` read (configs/measured/learning_status.yaml).

A cell's rise on one seed is its evaluation after the last common iteration minus its evaluation before training
(the same base model, prompts and seeds: one number for every seed of a world). Over seeds: the mean rise with its
Student t interval (`stats.mean_interval`). Verdict: **rises** when the whole interval is above 0, **falls** when it
is below, else **cannot tell**, with the power the cell had: the smallest mean rise this many seeds at this spread
would detect 80% of the time (`minimal_detectable`). The value compared is the evaluation's gold reward where the
run has one, else its total (`report.eval_key`); every other evaluation metric (e.g. the video reward's motion part)
gets the same table.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from pathlib import Path

import numpy as np
from solrl_core.bench.report import _json_safe, _machine, collect_run
from solrl_core.bench.stats import LEVEL, POWER, mean_interval, minimal_detectable
from solrl_core.eval_metrics import GAP_KEY
from solrl_core.run.rundir import write_json_atomic

RISES, FALLS, UNKNOWN = "rises", "falls", "cannot tell"


def verdict(est) -> str:
    """rises / falls / cannot tell from the interval of the mean rise (module docstring)."""
    if est.n < 2 or math.isnan(est.lo):
        return UNKNOWN
    if est.lo > 0:
        return RISES
    if est.hi < 0:
        return FALLS
    return UNKNOWN


def _rise(per_seed: dict[int, dict], key: str) -> dict:
    rises = [d["final"][key] - d["start"][key] for d in per_seed.values()
             if key in d["final"] and key in d["start"]]
    est = mean_interval(rises)
    sd = float(np.std(rises, ddof=1)) if len(rises) > 1 else math.nan
    starts = [d["start"][key] for d in per_seed.values() if key in d["start"]]
    finals = [d["final"][key] for d in per_seed.values() if key in d["final"]]
    return {"start": float(np.mean(starts)) if starts else math.nan,
            "final": float(np.mean(finals)) if finals else math.nan,
            "rise": est.as_dict(), "sd": sd, "verdict": verdict(est),
            "minimal_detectable": minimal_detectable(sd, est.n)}


def cell_summary(histories) -> dict:
    """One cell from the RunHistory of each of its seeds: the compared value's rise and verdict, every metric's rise,
    the curve (mean and 95% band of the rise at each evaluation step every seed has) and the per-seed numbers."""
    steps = sorted(set.intersection(*(set(h.evals) for h in histories))) if histories else []
    if not steps or steps[0] != 0 or len(steps) < 2:
        return {"seeds": [h.seed for h in histories], "steps": steps, "verdict": UNKNOWN, "complete": False}
    last = steps[-1]
    per_seed = {h.seed: {"start": h.eval_metrics[0], "final": h.eval_metrics[last],
                         "curve": [h.evals[s] - h.evals[0] for s in steps],
                         "seconds": float(sum(it["cpu_seconds"] for it in h.iterations))} for h in histories}
    key = histories[0].eval_key

    def same_as_key(m: str) -> bool:  # the compared value under another name (the total, the gold reward's own)
        return all(d[end][m] == d[end][key] for d in per_seed.values() for end in ("start", "final"))

    metrics = sorted(m for m in set.intersection(*(set(d["start"]) for d in per_seed.values()))
                     if m not in (key, GAP_KEY) and not same_as_key(m))
    band = [mean_interval([d["curve"][i] for d in per_seed.values()]) for i in range(len(steps))]
    main = _rise(per_seed, key)
    complete = all(len(h.iterations) >= h.cfg.iterations for h in histories) and last >= histories[0].cfg.iterations
    if not complete:
        main["verdict"] = UNKNOWN  # the rise so far: the verdict waits for every run's last iteration
    return {
        "seeds": sorted(per_seed), "steps": steps, "final_step": last, "key": key, **main,
        "complete": complete,
        "metrics": {m: _rise(per_seed, m) for m in metrics},
        "curve": {"steps": steps, "rise": [b.value for b in band], "lo": [b.lo for b in band],
                  "hi": [b.hi for b in band]},
        "per_seed": per_seed,
        "cpu_seconds_per_run": float(np.mean([d["seconds"] for d in per_seed.values()])),
    }


def analyse(runs, matrix) -> dict:
    """Every cell's summary (JSON-serialisable), grouped by world and objective in the matrix's order."""
    groups: dict[tuple[str, str, str], list] = {}
    for r in runs:
        groups.setdefault((r.world, r.objective, r.label), []).append(collect_run(r.label, r.seed, r.run_dir))
    cells = {}
    for (world, objective, family), hs in groups.items():
        cfg = hs[0].cfg
        cells[f"{world}/{objective}/{family}"] = {
            "world": world, "objective": objective, "family": family,
            "iterations": cfg.iterations, "prompts_per_iteration": cfg.prompts.per_iteration,
            "explore": f"{cfg.explore.seeds_per_prompt} seeds x {cfg.explore.precision} @ {cfg.explore.steps}",
            "regenerate": cfg.regenerate.enabled, **cell_summary(hs)}
    return {"name": matrix.name, "protocol": matrix.protocol, "seeds": matrix.seeds, "level": LEVEL,
            "power": POWER, "cells": cells}


def status(report: dict, source: str) -> dict:
    """The learning status of each cell, as configs/measured/learning_status.yaml keeps it: verdict, rise and interval,
    seeds and iterations, and where it was measured."""
    out = {}
    for name, c in report["cells"].items():
        rise = c.get("rise", {})
        out[name] = {"verdict": c["verdict"], "rise": _round(rise.get("value")),
                     "interval": [_round(rise.get("lo")), _round(rise.get("hi"))], "seeds": len(c["seeds"]),
                     "iterations": c["iterations"], "metric": c.get("key"), "source": source}
    return out


def _round(x, digits: int = 4):
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


# ----------------------------------------------------------------------------------------------- plots


def plot_world(report: dict, world: str, path: Path) -> None:
    """One panel per objective of `world`: each family's held-out rise over iterations, its 95% band over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in report["cells"].values() if c["world"] == world and "curve" in c]
    objectives = list(dict.fromkeys(c["objective"] for c in cells))
    fig, axes = plt.subplots(1, max(1, len(objectives)), figsize=(4.2 * max(1, len(objectives)), 3.8), dpi=110,
                             sharey=True, squeeze=False)
    for ax, objective in zip(axes[0], objectives):
        for c in (c for c in cells if c["objective"] == objective):
            curve = c["curve"]
            (line,) = ax.plot(curve["steps"], curve["rise"], marker="o", ms=3,
                              label=f"{c['family']} ({c['verdict']}, n={len(c['seeds'])})")
            if len(c["seeds"]) > 1:
                ax.fill_between(curve["steps"], curve["lo"], curve["hi"], color=line.get_color(), alpha=0.15, lw=0)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"{world}: {objective}", fontsize=9)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("held-out rise over the start (95% band)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------- markdown


def _f(x, digits: int = 4, sign: bool = False) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _ci(rise: dict) -> str:
    if not rise or rise.get("n", 0) < 2:
        return _f(rise.get("value") if rise else None, sign=True)
    return f"{_f(rise['value'], sign=True)} [{_f(rise['lo'], sign=True)}, {_f(rise['hi'], sign=True)}]"


def format_markdown(report: dict, plots: dict[str, str], command: str | None) -> str:
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Learning matrix `{report['name']}`: does every cell rise?", "",
             f"Generated {now} on {_machine()}" + (f" by `{command}`." if command else "."), "",
             "Each cell trains one objective with one family on one world of the embedded testbed, once per "
             "training seed. Its rise on a seed is the held-out evaluation after its last iteration minus the one "
             "before training (EMA weights, fixed prompts and seeds). Over seeds: the mean rise with its 95% "
             "Student t interval; **rises** when the whole interval is above 0, **falls** when below, else "
             "**cannot tell**, with the smallest mean rise the cell's seeds and spread would detect 80% of the time "
             "(its power). Metric: the evaluation's gold reward where the run has one, else its total.", "",
             "A cell whose runs have not all finished shows the iterations its seeds share (\"16 of 24\"); its "
             "verdict waits for the rest.", "",
             "| world | objective | family | seeds | iterations | start | final | rise [95% CI] | verdict | "
             "detectable at 80% | CPU s per run |",
             "|---|---|---|---:|---:|---:|---:|---|---|---:|---:|"]
    for c in report["cells"].values():
        done = c["iterations"] if c.get("complete") else f"{c.get('final_step', 0)} of {c['iterations']}"
        lines.append(
            f"| {c['world']} | {c['objective']} | {c['family']} | {len(c['seeds'])} | {done} | "
            f"{_f(c.get('start'))} | {_f(c.get('final'))} | {_ci(c.get('rise', {}))} | **{c['verdict']}** | "
            f"{_f(c.get('minimal_detectable'))} | {_f(c.get('cpu_seconds_per_run'), 0)} |")
    parts = [(c, m, d) for c in report["cells"].values() for m, d in c.get("metrics", {}).items()]
    if parts:
        lines += ["", "## Every evaluation metric", "",
                  "The same rise for the other metrics each evaluation scores (a reward at weight 0, a part of the "
                  "reward), per cell.", "",
                  "| world | objective | family | metric | start | final | rise [95% CI] | verdict |",
                  "|---|---|---|---|---:|---:|---|---|"]
        lines += [f"| {c['world']} | {c['objective']} | {c['family']} | {m} | {_f(d['start'])} | {_f(d['final'])} | "
                  f"{_ci(d['rise'])} | {d['verdict']} |" for c, m, d in parts]
    lines += ["", "## Curves", ""]
    lines += [f"![{name}]({path})" for name, path in plots.items()]
    lines += ["", "## Per-seed numbers", "",
              "What every interval above is computed from: each seed's evaluation before training, after its last "
              "iteration, and the rise.", ""]
    for name, c in report["cells"].items():
        if "per_seed" not in c:
            lines.append(f"**{name}**: incomplete (evaluations at steps {c.get('steps')})\n")
            continue
        key = c["key"]
        lines += [f"**{name}** ({key}, after {c['final_step']} iterations)", "",
                  "| seed | start | final | rise | CPU s |", "|---:|---:|---:|---:|---:|"]
        lines += [f"| {seed} | {_f(d['start'][key])} | {_f(d['final'][key])} | "
                  f"{_f(d['final'][key] - d['start'][key], sign=True)} | {_f(d['seconds'], 0)} |"
                  for seed, d in c["per_seed"].items()]
        lines.append("")
    return "\n".join(lines) + "\n"


def build_report(runs, matrix, out_dir: str | Path, command: str | None = None) -> dict:
    """Analyse the runs, draw one plot per world, write `report.md` and `report.json` into `out_dir`; returns the
    report with `files`."""
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    report = analyse(runs, matrix)
    plots = {}
    for world in dict.fromkeys(c["world"] for c in report["cells"].values()):
        path = out / "plots" / f"{world}.png"
        plot_world(report, world, path)
        plots[world] = f"plots/{world}.png"
    text = format_markdown(report, plots, command)
    tmp = out / "report.md.tmp"
    tmp.write_text(text)
    os.replace(tmp, out / "report.md")
    report = _json_safe(report)
    write_json_atomic(out / "report.json", report)
    report["files"] = [str(out / "report.md"), str(out / "report.json"), *[str(out / p) for p in plots.values()]]
    return report
