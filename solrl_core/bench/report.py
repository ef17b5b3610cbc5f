"""The benchmark report: from the run directories of the benchmark to `report.md`, `report.json` and PNG plots.

Pure library code (no Prefect, no MLflow). What it reads from each run directory:

* `config.yaml` (the frozen run config: family shapes);
* `iter_XXXX/manifests/<stage>.json` of the finished iterations (all seven stages): measured seconds per stage,
  the explore precision and steps actually used, and score_final's ranking fidelity on the selected seeds;
* `iter_XXXX/manifests/audit.json`: the full-fidelity audits;
* `eval/step_NNNN/metrics.json`: held-out evaluation rewards (EMA weights) after NNNN iterations; the value
  compared is `eval_value` (the gold evaluator's reward when the run has one, else the weighted total).

Costs. "Measured CPU seconds" = the sum of the seven stages' wall-clock seconds (evaluation and audits excluded:
they are the same work for every family or are diagnostics). "Modeled GPU cost" = GPU-seconds the cost planner
predicts for each finished iteration's shapes (P prompts, N seeds, K kept, the explore precision and steps actually
used, regenerate steps, training timesteps), see `PlannerPricer`. Both are cumulative: the cost of the evaluation
after s iterations is that of iterations 0..s-1.

Time to target. target = the baseline family's evaluation before training plus the bench config's
`target_gain`, fixed before the runs (pre-registered). For
each family the cost to target is the cost at the first evaluation whose seed-averaged reward reaches the target
(no interpolation: the resolution is the evaluation interval), on three axes: iterations, measured CPU seconds,
modeled GPU-seconds (costs averaged over seeds at that evaluation). speed-up vs a reference = reference's cost to
target / this family's cost to target. A family that never reaches it gets no value; when only the reference
misses it, the ratio is reported as a lower bound (the reference's total cost / this family's cost).

Statistics over training seeds (`verdicts`, `stats`): the same target reached per seed at one-evaluation
resolution (censored when never), 95% intervals of each family's final value (t) and time to target (Hall's
skewness-corrected t), paired differences (t) and speed-ups (Fieller) between families, one verdict per claim of the
method, the per-seed numbers every interval is computed from, and each method's simulated coverage (`coverage`).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from solrl_core.bench.coverage import TARGET as COVERAGE_TARGET, coverage_table
from solrl_core.bench.stats import LEVEL, MIN_SEEDS, mean_interval, paired_difference
from solrl_core.bench.verdicts import claims, difference_power, family_statistics, pair_statistics
from solrl_core.eval_metrics import GOLD_KEY, TOTAL_KEY
from solrl_core.rl.selection import kept_per_prompt
from solrl_core.run.rundir import STAGES, RunDir, write_json_atomic

AXES = ("iteration", "cpu", "gpu")
AXIS_TITLES = {"iteration": "iterations", "cpu": "measured CPU seconds", "gpu": "modeled GPU-seconds"}


class Pricer(Protocol):
    """Modeled GPU-seconds of one iteration of a run config, per stage: keys explore, regenerate, update, iteration."""

    title: str

    def __call__(self, cfg, explore_precision: str, explore_steps: int) -> dict[str, float]: ...


def eval_key(metrics: dict) -> str:
    """The evaluation metric the benchmark compares: the gold evaluator's reward when present, else the total."""
    return GOLD_KEY if GOLD_KEY in metrics else TOTAL_KEY


# ----------------------------------------------------------------------------------------------- pricing


class PlannerPricer:
    """Each iteration's shapes priced with the cost planner (`solrl_core.planner.cost_model.iteration_cost`).

    model "embedded": the forward FLOPs of the embedded model itself (`flops.count_flops`), decoding and the
    programmatic reward counted as free (pixel space, no reward network). Any planner model ("sd35l", "flux1",
    "sana", ...): the same shapes (prompts, seeds, K, steps, precision) priced on that full-size backbone at its
    official resolution, with its VAE decode and reward tower per image."""

    def __init__(self, model: str = "sd35l", gpu: str = "b200", gpus: int = 1, utilisation: float | None = None):
        from solrl_core.planner.gpus import DEFAULT_UTILISATION, get_gpu

        self.model, self.gpus = model, gpus
        self.gpu = get_gpu(gpu)
        self.utilisation = DEFAULT_UTILISATION if utilisation is None else utilisation
        self._forward = None
        self._per_image = 0.0
        self.title = ""

    def _prepare(self, cfg) -> None:
        if self._forward is not None:
            return
        if self.model == "embedded":
            from solrl_core.planner.config_plan import embedded_forward

            self._forward = embedded_forward(cfg)
            self._per_image = 0.0
            what = (f"the embedded model's own forward ({self._forward.total / 1e6:.1f} MFLOP per sample, "
                    f"{100 * self._forward.low_precision_share:.0f}% in 4 bits; decode and reward free)")
        else:
            from solrl_core.planner.flops import decode_and_score_flops, forward_flops

            self._forward = forward_flops(self.model)
            self._per_image = decode_and_score_flops(self.model)["total"]
            what = (f"the same shapes priced on {self._forward.title} at {self._forward.resolution} px "
                    f"({self._forward.total / 1e12:.2f} TFLOP per forward, "
                    f"{100 * self._forward.low_precision_share:.0f}% in 4 bits; VAE decode + reward tower per image)")
        self.title = (f"{what}, on {self.gpus} x {self.gpu.title} at utilisation {self.utilisation:.2f}; "
                      "GPU-seconds = seconds x GPUs; the update counts train.optimizer_steps passes")

    def __call__(self, cfg, explore_precision: str, explore_steps: int) -> dict[str, float]:
        from solrl_core.planner.cost_model import _CONFIG_PRECISION, Throughput, iteration_cost, shapes_from_config

        self._prepare(cfg)
        shapes = replace(shapes_from_config(cfg), explore_steps=int(explore_steps),
                         explore_precision=_CONFIG_PRECISION.get(explore_precision, "nvfp4"))
        cost = iteration_cost(self._forward, shapes, Throughput(self.gpu, self.gpus, self.utilisation),
                              self._per_image)
        s = cost["seconds"]
        return {key: float(s[key]) * self.gpus for key in ("explore", "regenerate", "update", "iteration")}


# ----------------------------------------------------------------------------------------------- collection


@dataclass
class RunHistory:
    """What one run directory holds, as plain numbers."""

    label: str
    seed: int
    run_dir: Path
    cfg: object
    iterations: list[dict] = field(default_factory=list)  # finished iterations, in order
    evals: dict[int, float] = field(default_factory=dict)  # step -> eval reward
    eval_metrics: dict[int, dict] = field(default_factory=dict)  # step -> every eval metric
    audits: dict[int, dict] = field(default_factory=dict)  # iteration -> audit summary
    eval_seconds: dict[int, float] = field(default_factory=dict)  # step -> wall seconds of that evaluation
    eval_samples: dict[int, int] = field(default_factory=dict)  # step -> images in that evaluation
    eval_errors: dict[int, float] = field(default_factory=dict)  # step -> standard error of that evaluation's mean
    eval_key: str = TOTAL_KEY  # which metric `evals` holds (see `eval_key`)
    mlflow_run_id: str | None = None


def collect_run(label: str, seed: int, run_dir: str | Path) -> RunHistory:
    """Read a run directory (see the module docstring). Only iterations whose seven stages are complete count,
    and only the leading run of them (iteration i needs 0..i-1)."""
    from solrl_core.run_config import load_run_config

    run = RunDir(run_dir)
    cfg = load_run_config(run)
    hist = RunHistory(label, seed, run.root, cfg)
    for i in run.iterations_present():
        if i != len(hist.iterations) or not all(run.is_complete(i, s) for s in STAGES):
            break
        summaries = {s: run.manifest(i, s)["summary"] for s in STAGES}
        explore = summaries["explore"]
        final = summaries["score_final"]
        hist.iterations.append({
            "iteration": i,
            "completed_at": float(run.manifest(i, "update").get("completed_at", math.nan)),
            "seconds": {s: float(summaries[s].get("seconds", 0.0)) for s in STAGES},
            "cpu_seconds": float(sum(summaries[s].get("seconds", 0.0) for s in STAGES)),
            "explore_precision": str(explore.get("precision", cfg.explore.precision)),
            "explore_steps": int(explore.get("steps", cfg.explore.steps)),
            "train_reward": float(final.get("mean", math.nan)),
            "fidelity": {k[len("fidelity_"):]: float(v) for k, v in final.items()
                         if k.startswith("fidelity_") and k != "fidelity_n_prompt_groups"},
        })
        if run.is_complete(i, "audit"):
            hist.audits[i] = run.manifest(i, "audit")["summary"]
    for data in run.evaluations():
        step = int(data["step"])
        if step <= len(hist.iterations):
            hist.eval_key = eval_key(data["metrics"])
            hist.evals[step] = float(data["metrics"][hist.eval_key])
            hist.eval_samples[step] = int(data.get("samples", 0))
            hist.eval_metrics[step] = {k: float(v) for k, v in data["metrics"].items()}
            hist.eval_seconds[step] = float(data.get("seconds", math.nan))
            blocks = (data.get("seed_blocks") or {}).get(hist.eval_key)
            if blocks and len(blocks) > 1:  # its seed blocks' spread (eval_metrics.seed_blocks)
                hist.eval_errors[step] = float(np.std(blocks, ddof=1) / math.sqrt(len(blocks)))
    _orchestration_overhead(hist)
    info = run.run_info()
    if info is not None:
        hist.mlflow_run_id = info.get("mlflow_run_id")
    return hist


def _orchestration_overhead(hist: RunHistory) -> None:
    """Per iteration i >= 1, the seconds between iteration i-1's update and iteration i's (`wall_seconds`) that went
    to neither a stage (the seven stages' own seconds), nor the evaluation of step i, nor iteration i's audit: the
    orchestration's share (Prefect, MLflow logging, persistence, integrity checks, grids) as `overhead_seconds`.
    Iteration 0 has no start mark (it also pays the run's setup) and stays out."""
    for prev, it in zip(hist.iterations, hist.iterations[1:]):
        wall = it["completed_at"] - prev["completed_at"]
        inside = it["cpu_seconds"] + hist.eval_seconds.get(it["iteration"], 0.0)
        inside += float(hist.audits.get(it["iteration"], {}).get("seconds", 0.0))
        it["wall_seconds"], it["overhead_seconds"] = wall, wall - inside


def overhead_summary(histories: list[RunHistory]) -> dict[str, float]:
    """Orchestration overhead over every measured iteration of `histories`: mean seconds per iteration and its share
    of the iterations' wall time (`fraction`), and how many iterations were measured."""
    its = [it for h in histories for it in h.iterations if np.isfinite(it.get("overhead_seconds", math.nan))]
    if not its:
        return {"seconds": math.nan, "fraction": math.nan, "iterations": 0}
    wall = sum(it["wall_seconds"] for it in its)
    over = sum(it["overhead_seconds"] for it in its)
    return {"seconds": over / len(its), "fraction": over / wall if wall > 0 else math.nan, "iterations": len(its)}


def cumulative_costs(hist: RunHistory, pricer: Callable, store: bool = True) -> dict[str, list[float]]:
    """Per axis, the cost after s iterations for s = 0..len(iterations) (index s). With `store`, each iteration
    keeps its modeled per-stage cost under "modeled"."""
    cpu, gpu = [0.0], [0.0]
    for it in hist.iterations:
        modeled = pricer(hist.cfg, it["explore_precision"], it["explore_steps"])
        if store:
            it["modeled"] = modeled
        cpu.append(cpu[-1] + it["cpu_seconds"])
        gpu.append(gpu[-1] + modeled["iteration"])
    return {"iteration": [float(s) for s in range(len(hist.iterations) + 1)], "cpu": cpu, "gpu": gpu}


# ----------------------------------------------------------------------------------------------- analysis


def _stats(values) -> dict:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=np.float64)
    if len(v) == 0:
        return {"mean": math.nan, "std": None, "min": math.nan, "max": math.nan, "n": 0}
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else None,
            "min": float(v.min()), "max": float(v.max()), "n": int(len(v))}


def family_curves(histories: list[RunHistory], pricer: Callable, store: bool = True) -> dict:
    """Seed-aggregated curves of one family at the evaluation steps every seed has."""
    per_seed = []
    for h in histories:
        costs = cumulative_costs(h, pricer, store)
        per_seed.append((h, costs))
    steps = sorted(set.intersection(*(set(h.evals) for h in histories))) if histories else []
    curve = {"steps": steps, "reward": [], "reward_std": [], "reward_min": [], "reward_max": [], "reward_lo": [],
             "reward_hi": [], **{f"cost_{a}": [] for a in AXES}}
    for s in steps:
        values = [h.evals[s] for h in histories]
        st = _stats(values)
        ci = mean_interval(values)  # the plots' band: 95% t interval of the seed mean
        curve["reward"].append(st["mean"])
        curve["reward_std"].append(st["std"])
        curve["reward_min"].append(st["min"])
        curve["reward_max"].append(st["max"])
        curve["reward_lo"].append(ci.lo)
        curve["reward_hi"].append(ci.hi)
        for a in AXES:
            curve[f"cost_{a}"].append(float(np.mean([c[a][s] for _, c in per_seed])))
    curve["per_seed"] = {
        h.seed: {"steps": sorted(h.evals), "reward": [h.evals[s] for s in sorted(h.evals)],
                 **{f"cost_{a}": [c[a][s] for s in sorted(h.evals)] for a in AXES}}
        for h, c in per_seed
    }
    return curve


def first_reaching(steps, rewards, costs, target: float) -> dict | None:
    """The first evaluation (in step order) whose reward reaches `target`: {step, cost}; None when none does."""
    for s, r, c in zip(steps, rewards, costs):
        if np.isfinite(r) and r >= target:
            return {"step": int(s), "cost": float(c)}
    return None


def time_to_target(curves: dict[str, dict], target: float, references: list[str]) -> dict[str, dict]:
    """Per family and axis: the cost to target and the speed-up against each reference (see module docstring)."""
    out: dict[str, dict] = {}
    hits = {fam: {a: first_reaching(c["steps"], c["reward"], c[f"cost_{a}"], target) for a in AXES}
            for fam, c in curves.items()}
    for fam, c in curves.items():
        out[fam] = {}
        for a in AXES:
            hit = hits[fam][a]
            entry = {"step": hit["step"] if hit else None, "cost": hit["cost"] if hit else None,
                     "total_cost": c[f"cost_{a}"][-1] if c["steps"] else None, "speedup": {}, "speedup_kind": {}}
            for ref in references:
                if ref not in curves:
                    continue
                ref_hit = hits[ref][a]
                value, kind = None, None
                if hit and hit["cost"] > 0:
                    if ref_hit:
                        value, kind = ref_hit["cost"] / hit["cost"], "exact"
                    elif curves[ref]["steps"]:
                        value, kind = curves[ref][f"cost_{a}"][-1] / hit["cost"], "lower_bound"
                entry["speedup"][ref] = value
                entry["speedup_kind"][ref] = kind
            out[fam][a] = entry
    return out


def _fidelity_tables(groups: dict[str, list[RunHistory]]) -> tuple[dict, dict]:
    """Per family: score_final fidelity per iteration (mean over seeds), and the audits per iteration."""
    keys = ("spearman", "kendall", "spearman_within_prompt", "kendall_within_prompt")
    selected, audits = {}, {}
    for fam, hs in groups.items():
        n = min(len(h.iterations) for h in hs)
        rows = []
        for i in range(n):
            row = {"iteration": i}
            for k in keys:
                row[k] = _stats([h.iterations[i]["fidelity"].get(k, math.nan) for h in hs])["mean"]
            rows.append(row)
        if any(np.isfinite(r["spearman"]) for r in rows):
            selected[fam] = rows
        audit_keys = ("spearman_within_prompt", "kendall_within_prompt", "spearman_pooled", "kendall_pooled",
                      "topk_overlap", "bottomk_overlap")
        its = sorted(set().union(*(h.audits for h in hs)))
        if its:
            audits[fam] = [
                {"iteration": i, "seeds": sum(i in h.audits for h in hs),
                 **{k: _stats([h.audits[i].get(k, math.nan) for h in hs if i in h.audits])["mean"]
                    for k in audit_keys},
                 "explore": next(f"{h.audits[i].get('explore_precision')}, {h.audits[i].get('explore_steps')} steps"
                                 for h in hs if i in h.audits)}
                for i in its
            ]
    return selected, audits


def _alternative_costs(groups: dict[str, list[RunHistory]], alternatives: dict[str, Callable], target: float,
                       references: list[str]) -> dict[str, dict]:
    """The modeled-GPU numbers again with other pricers (other backbones): per family the GPU-seconds per iteration
    and the speed-up to target against each reference."""
    out = {}
    for name, alt in alternatives.items():
        curves = {fam: family_curves(hs, alt, store=False) for fam, hs in groups.items()}
        ttt = time_to_target(curves, target, references) if np.isfinite(target) else {}
        per_iteration = {}
        for fam, hs in groups.items():
            costs = [alt(h.cfg, it["explore_precision"], it["explore_steps"])["iteration"]
                     for h in hs for it in h.iterations]
            per_iteration[fam] = _stats(costs)["mean"]
        out[name] = {
            "title": getattr(alt, "title", name),
            "gpu_seconds_per_iteration": per_iteration,
            "speedup": {fam: ttt.get(fam, {}).get("gpu", {}).get("speedup", {}) for fam in groups},
            "speedup_kind": {fam: ttt.get(fam, {}).get("gpu", {}).get("speedup_kind", {}) for fam in groups},
        }
    return out


def analyse(runs, bench, pricer: Callable, alternatives: dict[str, Callable] | None = None) -> dict:
    """All numbers of the report (JSON-serialisable): per family curves, final rewards, costs, time to target,
    fidelity, statistics over seeds and the verdict per claim. `runs`: objects with `label`, `seed`, `run_dir`; `alternatives`:
    more pricers (name -> pricer) whose per-iteration cost and speed-ups are reported beside the main axis."""
    groups: dict[str, list[RunHistory]] = {}
    for r in runs:
        groups.setdefault(r.label, []).append(collect_run(r.label, r.seed, r.run_dir))
    curves = {fam: family_curves(hs, pricer) for fam, hs in groups.items()}
    families = {}
    for fam, hs in groups.items():
        c = curves[fam]
        final_step = c["steps"][-1] if c["steps"] else None
        final = _stats([h.evals[final_step] for h in hs]) if final_step is not None else _stats([])
        its = [it for h in hs for it in h.iterations]
        cfg = hs[0].cfg
        families[fam] = {
            "family": cfg.family,
            "seeds": [h.seed for h in hs],
            "iterations_done": min(len(h.iterations) for h in hs),
            "final_step": final_step,
            "final_reward": final["mean"],
            "final_reward_std": final["std"],
            "final_reward_min": final["min"],
            "final_reward_max": final["max"],
            "final_reward_per_seed": {h.seed: h.evals.get(final_step) for h in hs},
            "initial_reward": curves[fam]["reward"][0] if c["steps"] and c["steps"][0] == 0 else None,
            "shapes": {
                "prompts": cfg.prompts.per_iteration, "seeds_per_prompt": cfg.explore.seeds_per_prompt,
                "k": kept_per_prompt(cfg.select, cfg.explore.seeds_per_prompt),
                "select": cfg.select.mode, "explore_precision": sorted({it["explore_precision"] for it in its}),
                "explore_steps": sorted({it["explore_steps"] for it in its}) or [cfg.explore.steps],
                "regenerate": bool(cfg.regenerate.enabled), "regenerate_steps": cfg.regenerate.steps,
            },
            "cpu_seconds_per_iteration": {
                **{s: _stats([it["seconds"][s] for it in its])["mean"] for s in STAGES},
                "iteration": _stats([it["cpu_seconds"] for it in its])["mean"],
            },
            "gpu_seconds_per_iteration": {
                k: _stats([it["modeled"][k] for it in its])["mean"]
                for k in ("explore", "regenerate", "update", "iteration")
            } if its else {},
            "curve": c,
            "orchestration_overhead": overhead_summary(hs),
        }
    baseline = bench.baseline
    references = [r for r in dict.fromkeys([baseline, *bench.ratio_to]) if r in groups]
    start = families[baseline]["initial_reward"] if baseline in families else None
    target = start + bench.target_gain if start is not None else math.nan  # pre-registered: its start + a gain
    ttt = time_to_target(curves, target, references) if np.isfinite(target) else {}
    for fam in families:
        families[fam]["time_to_target"] = ttt.get(fam, {})
        families[fam]["statistics"] = family_statistics(curves[fam], target)
    pairs = pair_statistics({fam: d["statistics"] for fam, d in families.items()})
    selected, audits = _fidelity_tables(groups)
    alternative = _alternative_costs(groups, alternatives or {}, target, references)
    all_hs = [h for hs in groups.values() for h in hs]
    report = {
        "name": bench.name,
        "protocol": bench.protocol,
        "iterations": bench.iterations,
        "seeds": bench.seeds,
        "eval_every": bench.eval_every,
        "audit_every": bench.audit_every,
        "eval_samples": min((n for h in all_hs for n in h.eval_samples.values()), default=0),
        "eval_key": GOLD_KEY if any(h.eval_key == GOLD_KEY for h in all_hs) else TOTAL_KEY,
        "margin": bench.margin,
        "target_gain": bench.target_gain,
        "baseline": baseline,
        "references": references,
        "target": target,
        "cost": {"title": getattr(pricer, "title", str(pricer)), "model": bench.cost.model, "gpu": bench.cost.gpu,
                 "gpus": bench.cost.gpus},
        "families": families,
        "alternative_costs": alternative,
        "fidelity_selected": selected,
        "audits": audits,
        "pairs": pairs,
        "runs": {f"{h.label}-s{h.seed}": {"run_dir": str(h.run_dir), "mlflow_run_id": h.mlflow_run_id,
                                          "iterations": len(h.iterations)}
                 for hs in groups.values() for h in hs},
    }
    report["eval_noise"] = eval_noise(groups)
    fidelity = _audits_per_seed(groups)
    report["fidelity_per_seed"] = fidelity
    report["claims"] = claims({fam: d["statistics"] for fam, d in families.items()}, pairs, baseline,
                              bench.margin, fidelity, target)
    report["coverage"] = coverage_table(tuple(sorted({MIN_SEEDS, bench.seeds})))
    report["resolution"] = resolution(families, pairs, report["eval_noise"], bench.margin)
    return report


def eval_noise(groups: dict[str, list[RunHistory]]) -> dict:
    """The evaluation's own noise: per family the mean over its seeds and evaluations of the standard error of an
    evaluation's mean (from its seed blocks), and overall; NaN for runs whose evaluations have no blocks."""
    per = {fam: _stats([e for h in hs for e in h.eval_errors.values()])["mean"] for fam, hs in groups.items()}
    values = [v for v in per.values() if np.isfinite(v)]
    return {"per_family": per, "standard_error": float(np.mean(values)) if values else math.nan}


def resolution(families: dict, pairs: list[dict], noise: dict, margin: float) -> list[dict]:
    """What this benchmark can tell apart, per pair of families: the spread of their paired final differences, the
    smallest mean difference its seeds detect 80% of the time, the seeds that would resolve `margin` of the second
    family's final value, and how much of the spread is the evaluation's own noise (2 se² of the variance)."""
    out = []
    for row in pairs:
        a, b = row["a"], row["b"]
        fa, fb = (families[f]["statistics"]["final_reward_per_seed"] for f in (a, b))
        bound = margin * abs(families[b]["final_reward"]) if np.isfinite(families[b]["final_reward"]) else math.nan
        power = difference_power(fa, fb, bound)
        se = noise["standard_error"]
        share = 2 * se * se / power["sd"] ** 2 if np.isfinite(se) and power["sd"] and np.isfinite(power["sd"]) else \
            math.nan
        out.append({"a": a, "b": b, "difference": paired_difference(fa, fb).as_dict(), **power, "margin": bound,
                    "eval_noise_share": share})
    return out


def _audits_per_seed(groups: dict[str, list[RunHistory]]) -> dict[str, dict[int, dict]]:
    """Per audited family and seed, each audit figure averaged over that seed's audits."""
    keys = ("spearman_within_prompt", "kendall_within_prompt", "spearman_pooled", "kendall_pooled")
    return {fam: {h.seed: {k: _stats([a.get(k, math.nan) for a in h.audits.values()])["mean"] for k in keys}
                  for h in hs if h.audits}
            for fam, hs in groups.items() if any(h.audits for h in hs)}


def _rel(a: float, b: float) -> float:
    return (a - b) / abs(b) if b else math.nan


# ----------------------------------------------------------------------------------------------- plots


def _plot_curves(report: dict, axis: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for fam, data in report["families"].items():
        c = data["curve"]
        if not c["steps"]:
            continue
        x = c[f"cost_{axis}"]
        (line,) = ax.plot(x, c["reward"], marker="o", ms=3, label=f"{fam} (n={len(data['seeds'])})")
        if len(data["seeds"]) > 1:
            ax.fill_between(x, c["reward_lo"], c["reward_hi"], color=line.get_color(), alpha=0.15, lw=0)
    if np.isfinite(report["target"]):
        ax.axhline(report["target"], color="grey", ls="--", lw=1,
                   label=f"target ({report['baseline']} start + {report['target_gain']:g})")
    ax.set_xlabel(AXIS_TITLES[axis])
    ax.set_ylabel(f"held-out eval {report['eval_key']} (EMA)")
    ax.set_title(f"eval reward vs {AXIS_TITLES[axis]}" + (" (band: 95% CI of the seed mean)" if report["seeds"] > 1
                                                          else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_fidelity(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=110, sharey=True)
    for ax, key, bar in ((axes[0], "spearman", 0.93), (axes[1], "kendall", 0.80)):
        for fam, rows in report["fidelity_selected"].items():
            ax.plot([r["iteration"] for r in rows], [r[f"{key}_within_prompt"] for r in rows], marker=".",
                    label=f"{fam}: selected seeds, within prompt")
            ax.plot([r["iteration"] for r in rows], [r[key] for r in rows], ls=":", marker=".",
                    label=f"{fam}: selected seeds, pooled")
        for fam, rows in report["audits"].items():
            ax.plot([r["iteration"] for r in rows], [r[f"{key}_within_prompt"] for r in rows], marker="s", ms=7,
                    ls="none", label=f"{fam}: audit (whole groups), within prompt")
            ax.plot([r["iteration"] for r in rows], [r[f"{key}_pooled"] for r in rows], marker="D", ms=6,
                    ls="none", mfc="none", label=f"{fam}: audit, pooled")
        ax.axhline(bar, color="grey", ls="--", lw=1, label="paper (0.93 / 0.80)")
        ax.set_xlabel("iteration")
        ax.set_title(f"{key.capitalize()}: proxy vs full-precision reward")
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_ylabel("rank correlation")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.06 + 0.035 * math.ceil(len(labels) / 3), 1, 1))
    fig.savefig(path)
    plt.close(fig)


def _plot_costs(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fams = list(report["families"])
    parts = {"explore (+score, select)": ("quantize", "explore", "score_explore", "select"),
             "regenerate (+score)": ("regenerate", "score_final"), "update": ("update",)}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    bottom_cpu, bottom_gpu = np.zeros(len(fams)), np.zeros(len(fams))
    for (name, stages), gkey in zip(parts.items(), ("explore", "regenerate", "update")):
        cpu = np.array([sum(report["families"][f]["cpu_seconds_per_iteration"].get(s, 0.0) or 0.0 for s in stages)
                        for f in fams])
        gpu = np.array([report["families"][f]["gpu_seconds_per_iteration"].get(gkey, 0.0) or 0.0 for f in fams])
        axes[0].bar(fams, cpu, bottom=bottom_cpu, label=name)
        axes[1].bar(fams, gpu, bottom=bottom_gpu, label=gkey)
        bottom_cpu += cpu
        bottom_gpu += gpu
    axes[0].set_title("measured CPU seconds per iteration")
    axes[1].set_title("modeled GPU-seconds per iteration")
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


PLOTS = {
    "eval_vs_iteration.png": lambda r, p: _plot_curves(r, "iteration", p),
    "eval_vs_cpu_seconds.png": lambda r, p: _plot_curves(r, "cpu", p),
    "eval_vs_gpu_cost.png": lambda r, p: _plot_curves(r, "gpu", p),
    "fidelity.png": _plot_fidelity,
    "cost_per_iteration.png": _plot_costs,
}


# ----------------------------------------------------------------------------------------------- markdown


def _f(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "–"
    return f"{x:.{digits}f}"


def _g(x) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "–"
    return f"{x:.4g}"


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()}"


def _cost(x, axis: str) -> str:
    if x is None:
        return "not reached"
    if axis == "iteration":
        return f"{x:.0f}"
    return f"{x:.1f}" if axis == "cpu" else f"{x:.4g}"


def _speed(entry: dict, ref: str) -> str:
    v = entry.get("speedup", {}).get(ref)
    if v is None:
        return "–"
    return ("≥ " if entry.get("speedup_kind", {}).get(ref) == "lower_bound" else "") + f"{v:.2f}×"


def _bound(x, digits: int) -> str:
    """An interval end: ±∞ for an unbounded one (Fieller's when the denominator is not clearly above 0), – for none
    (one seed)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return f"{x:.{digits}f}"


def _ci(est: dict, digits: int = 4, unit: str = "") -> str:
    """value [lo, hi]; a censored estimate (a lower bound) as "> value [lo, > hi]"."""
    if not est or not est.get("n") or est.get("value") is None:
        return "–"
    cens = est.get("censored", 0)
    mark = "> " if cens else ""
    text = f"{mark}{est['value']:.{digits}f}{unit} [{_bound(est['lo'], digits)}, {mark}{_bound(est['hi'], digits)}]"
    return text + (f" ({cens}/{est['n']} censored)" if cens else "")


def _ratio(est: dict) -> str:
    """A speed-up with its interval; ≥ / ≤ when censoring makes it a lower / upper bound."""
    if not est or not est.get("n") or est.get("value") is None:
        return "–"
    mark = {(True, False): "≥ ", (False, True): "≤ "}.get((est["lower_bound"], est["upper_bound"]), "")
    if est["lower_bound"] and est["upper_bound"]:
        mark = "? "
    return f"{mark}{est['value']:.2f}× [{_bound(est['lo'], 2)}, {_bound(est['hi'], 2)}]"


def format_statistics(report: dict) -> list[str]:
    """The statistics over training seeds: per family, per pair, and the verdict table."""
    fams = report["families"]
    L = ["## Statistics over training seeds", "",
         f"Mean over seeds [{_pct(LEVEL)} interval: Student t for the final value, Hall's skewness-corrected t for "
         "the time to target]. Time to target per seed: the cost at its first evaluation reaching "
         f"{_f(report['target'])} ({report['baseline']}'s value before training + {report['target_gain']:g}, "
         "pre-registered); a seed that never does counts at its last cost and the mean is a lower bound (>).",
         "", "| family | seeds | final value | iterations to target | CPU s to target | GPU-s to target (modeled) |",
         "|---|---:|---|---|---|---|"]
    for fam, d in fams.items():
        st = d["statistics"]
        t = st["time_to_target"]
        L.append(f"| {fam} | {st['final_reward']['n']} | {_ci(st['final_reward'])} | {_ci(t['iteration'], 1)} | "
                 f"{_ci(t['cpu'], 1)} | {_ci(t['gpu'], 1)} |")
    L += ["", "Paired by seed (a − b over the seeds both have, Student t on the per-seed differences; speed-up = "
          "mean of b's costs to target / mean of a's, Fieller's interval; ≥: b censored, a lower bound; ≤: a "
          "censored, an upper bound):", "",
          "| a | b | final value a − b | speed-up (iterations) | speed-up (CPU s) | speed-up (GPU-s) |",
          "|---|---|---|---|---|---|"]
    for row in report["pairs"]:
        sp = row["speedup"]
        L.append(f"| {row['a']} | {row['b']} | {_ci(row['final_reward_diff'])} | {_ratio(sp['iteration'])} | "
                 f"{_ratio(sp['cpu'])} | {_ratio(sp['gpu'])} |")
    L += format_resolution(report)
    L += ["", "## Verdicts", "",
          f"Each claim of the method with its test: **holds** when the whole {_pct(LEVEL)} interval satisfies it, "
          "**does not hold** when the whole interval contradicts it, else **cannot tell at this power** (more seeds "
          f"needed; always with fewer than {MIN_SEEDS} seeds). No interval resamples or draws a random number: each "
          "verdict is a function of the per-seed numbers below alone, and recomputes from them by hand.",
          "", f"| claim | test | estimate [{_pct(LEVEL)} CI] | verdict |", "|---|---|---|---|"]
    for c in report["claims"]:
        L.append(f"| {c['claim']} | {c['test']} | {c['detail']} | **{c['verdict']}** |")
    if not report["claims"]:
        L.append("| (needs sol_rl and the reference families) | | | |")
    L.append("")
    return L + format_per_seed(report) + format_coverage(report)


def format_resolution(report: dict) -> list[str]:
    """The evaluation's noise and, per pair of families, what the benchmark's seeds can tell apart."""
    noise = report.get("eval_noise") or {}
    se = noise.get("standard_error", math.nan)
    L = ["", "## What this benchmark can resolve", "",
         f"An evaluation of {report['eval_samples']} samples has a standard error of {_f(se)} (the spread of its seed "
         "blocks, each every prompt's j-th fixed seed, over their number's root; mean over runs and evaluations). "
         "Per pair: the spread of the per-seed final differences, the smallest mean difference the seeds detect "
         f"80% of the time, and the seeds that would resolve {100 * report['margin']:g}% of the second family's final "
         "value; 'eval noise' is the share of the difference's variance two independent evaluation errors make "
         "(2 se²).", "",
         "| a | b | a − b [95% CI] | paired sd | detectable at 80% | seeds for "
         f"{100 * report['margin']:g}% | eval noise |", "|---|---|---|---:|---:|---:|---:|"]
    for r in report.get("resolution", []):
        need = r.get("seeds_for_effect")
        share = r.get("eval_noise_share")
        shown = "–" if share is None or not np.isfinite(share) else f"{100 * share:.0f}%"
        L.append(f"| {r['a']} | {r['b']} | {_ci(r['difference'])} | {_f(r['sd'])} | {_f(r['detectable'])} | "
                 f"{'–' if need is None else f'~{need}'} (±{_f(r['margin'])}) | {shown} |")
    return L


def _pct(level: float) -> str:
    return f"{100 * level:g}%"


def _seed_cost(entry: dict | None, digits: int) -> str:
    if not entry or entry.get("value") is None or not math.isfinite(entry["value"]):
        return "–"
    return ("> " if entry["censored"] else "") + f"{entry['value']:.{digits}f}"


def format_per_seed(report: dict) -> list[str]:
    """Per family, every seed's numbers the intervals and verdicts are computed from."""
    L = ["## Per-seed numbers", "",
         f"What every interval above is computed from. Final value: the evaluation at the last common step. Time to "
         f"target: the cost at the seed's first evaluation reaching {_f(report['target'])} (> : never reached, its "
         "last cost). Audit: the full-fidelity audit's within-prompt coefficients, mean over that seed's audits.", ""]
    fidelity = report.get("fidelity_per_seed", {})
    for fam, d in report["families"].items():
        st = d["statistics"]
        t = st["time_to_target"]
        audits = fidelity.get(fam, {})
        L += [f"**{fam}**", "", "| seed | final value | iterations to target | CPU s to target | GPU-s to target "
              "(modeled) | audit Spearman within | audit Kendall within |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for seed in sorted(st["final_reward_per_seed"], key=int):
            a = audits.get(seed) or audits.get(int(seed)) or audits.get(str(seed)) or {}
            cells = [_f(st["final_reward_per_seed"][seed])]
            cells += [_seed_cost(t[axis].get("per_seed", {}).get(seed), digits)
                      for axis, digits in (("iteration", 0), ("cpu", 1), ("gpu", 1))]
            cells += [_f(a.get("spearman_within_prompt"), 3), _f(a.get("kendall_within_prompt"), 3)]
            L.append(f"| {seed} | " + " | ".join(cells) + " |")
        L.append("")
    return L


def format_coverage(report: dict) -> list[str]:
    """Each interval method's simulated coverage at the minimum and the protocol's seed counts."""
    rows = report.get("coverage") or []
    if not rows:
        return []
    counts = sorted({int(n) for r in rows for n in r["coverage"]})
    L = ["## How often the intervals cover the truth", "",
         f"Each method's simulated coverage of its nominal {_pct(LEVEL)} interval (`solrl_core/bench/coverage.py`: "
         "the report's own interval code on 20,000 simulated data sets per cell, fixed RNG seed, Monte Carlo error "
         f"about ±0.0015), at {' and '.join(map(str, counts))} seeds, on models shaped like what each is used for. "
         f"A method is fit for a verdict when it keeps ≥ {COVERAGE_TARGET:g} on those; the per-family time to target "
         "is descriptive (no verdict reads it).", "",
         "| method | used for | data model | " + " | ".join(f"coverage at {n} seeds" for n in counts) + " |",
         "|---|---|---|" + "---:|" * len(counts)]
    for r in rows:
        cov = {int(n): v for n, v in r["coverage"].items()}
        L.append(f"| {r['method']} | {r['used_for']} | {r['model']} | "
                 + " | ".join(f"{cov[n]:.3f}" for n in counts) + " |")
    L.append("")
    return L


def format_markdown(report: dict, plots: dict[str, str], command: str | None = None) -> str:
    fams = report["families"]
    now = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    machine = _machine()
    L = [f"# Benchmark `{report['name']}`: the families side by side", ""]
    L.append(f"Generated {now} on {machine}" + (f" by `{command}`" if command else "") + ".")
    L += ["", f"## Protocol ({report['protocol']})", "",
          f"- {report['iterations']} iterations × {report['seeds']} training seed(s) per family; seed s of every "
          "family trains on the same prompts and noise (comparisons are paired by seed).",
          f"- Held-out evaluation every {report['eval_every']} iteration(s) and before training: EMA weights, the "
          f"same prompts and fixed evaluation seeds for every family, {report['eval_samples']} samples; value "
          f"compared: `{report['eval_key']}`.",
          f"- Full-fidelity audit every {report['audit_every']} iterations of the low-precision families."
          if report["audit_every"] else "- No full-fidelity audit.",
          f"- Target for time to target (pre-registered): {report['baseline']}'s value before training + "
          f"{report['target_gain']:g} = {_f(report['target'])}, reached per seed at one-evaluation resolution; a seed "
          "that never reaches it is censored at its last cost (shown as >).",
          f"- Intervals: {_pct(LEVEL)} over training seeds, closed-form (no resampling, no RNG): Student t for means "
          "and paired differences, Hall's skewness-corrected t for a family's time to target, Fieller's paired "
          f"interval for speed-ups; the 'within' bound is {100 * report['margin']:g}% of the reference's final "
          "value. Every cannot-tell verdict states its power: the difference its seeds detect 80% of the time.", ""]
    L += ["", "## Families", "",
          "| family | explore | select | regenerate | iterations done | seeds |", "|---|---|---|---|---:|---|"]
    for fam, d in fams.items():
        sh = d["shapes"]
        L.append(f"| {fam} | {sh['prompts']} prompts × {sh['seeds_per_prompt']} seeds, "
                 f"{'/'.join(sh['explore_precision']) or '–'}, {'/'.join(map(str, sh['explore_steps']))} steps | "
                 f"{sh['select']}, K = {sh['k']} | "
                 f"{'fp32, ' + str(sh['regenerate_steps']) + ' steps' if sh['regenerate'] else '–'} | "
                 f"{d['iterations_done']} | {', '.join(map(str, d['seeds']))} |")
    L += ["", "## Final held-out evaluation reward", "",
          f"Mean over seeds ± sample standard deviation (min – max); evaluation after the last common step. "
          f"Target for time-to-target: {report['baseline']}'s value before training + {report['target_gain']:g} = "
          f"**{_f(report['target'])}**.", "",
          "| family | final reward | ± std | min – max | initial (step 0) | Δ vs naive_scaling |",
          "|---|---:|---:|---|---:|---:|"]
    ref = fams.get("naive_scaling", {}).get("final_reward")
    for fam, d in fams.items():
        delta = "–" if ref is None else f"{100 * _rel(d['final_reward'], ref):+.2f}%"
        L.append(f"| {fam} | {_f(d['final_reward'])} | {_f(d['final_reward_std'])} | "
                 f"{_f(d['final_reward_min'])} – {_f(d['final_reward_max'])} | {_f(d['initial_reward'])} | {delta} |")
    L += ["", f"![eval vs iteration]({plots['eval_vs_iteration.png']})", ""]
    L += format_statistics(report)
    L += ["## Time to target of the seed-mean curve", "",
          f"Cost at the first evaluation whose seed-mean reward reaches {_f(report['target'])} (resolution: the "
          "evaluation interval), and the speed-up = reference's cost / this family's cost (≥: the reference "
          "never reached it, so its total cost is used).", ""]
    refs = report["references"]
    header = "| family | iterations | CPU s | GPU-s (modeled) | " + " | ".join(
        f"GPU speed-up vs {r} | CPU speed-up vs {r}" for r in refs) + " |"
    L += [header, "|---|---:|---:|---:|" + "---:|" * (2 * len(refs))]
    for fam, d in fams.items():
        t = d["time_to_target"]
        if not t:
            continue
        cells = [_cost(t["iteration"]["cost"], "iteration"), _cost(t["cpu"]["cost"], "cpu"),
                 _cost(t["gpu"]["cost"], "gpu")]
        for r in refs:
            cells += [_speed(t["gpu"], r), _speed(t["cpu"], r)]
        L.append(f"| {fam} | " + " | ".join(cells) + " |")
    L += ["", f"![eval vs modeled GPU cost]({plots['eval_vs_gpu_cost.png']})",
          f"![eval vs measured CPU seconds]({plots['eval_vs_cpu_seconds.png']})", ""]
    L += ["## Cost per iteration", "",
          f"Measured: wall-clock seconds of the seven stages on this machine (mean over iterations and seeds). "
          f"Modeled: {report['cost']['title']}. On a CPU the 4-bit explore is emulated (quantize–dequantize, then an "
          "fp32 matmul), so it is slower than fp32 here, not faster; the modeled axis prices it at the GPU's NVFP4 "
          "throughput.", "",
          "| family | CPU: explore | regenerate | update | iteration (s) | GPU: explore | regenerate | update | "
          "iteration (GPU-s) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for fam, d in fams.items():
        c, g = d["cpu_seconds_per_iteration"], d["gpu_seconds_per_iteration"]
        L.append(f"| {fam} | {_f(c.get('explore'), 1)} | {_f(c.get('regenerate'), 1)} | {_f(c.get('update'), 1)} | "
                 f"{_f(c.get('iteration'), 1)} | {_g(g.get('explore'))} | {_g(g.get('regenerate'))} | "
                 f"{_g(g.get('update'))} | {_g(g.get('iteration'))} |")
    L += ["", f"![cost per iteration]({plots['cost_per_iteration.png']})", "",
          "Orchestration overhead: the wall time between two iterations' updates that went to no stage, evaluation "
          "or audit (Prefect, MLflow logging, persistence, integrity checks, grids), from iteration 1 on:", "",
          "| family | seconds per iteration | share of the iteration's wall time | iterations measured |",
          "|---|---:|---:|---:|"]
    for fam, d in fams.items():
        o = d.get("orchestration_overhead", {})
        L.append(f"| {fam} | {_f(o.get('seconds'), 2)} | {_f(100 * o.get('fraction', math.nan), 1)}% | "
                 f"{o.get('iterations', 0)} |")
    L.append("")
    if report.get("alternative_costs"):
        L += ["### The modeled axis priced on other backbones", "",
              "The same finished iterations (shapes, explore precision and steps) priced by other models: GPU-seconds "
              f"per iteration relative to {report['baseline']}, and the modeled-GPU speed-up to target against "
              f"{report['baseline']} (the evaluations are the same; only the cost per iteration changes).", "",
              "| priced on | " + " | ".join(f"{fam}: cost/iter, speed-up" for fam in fams) + " |",
              "|---|" + "---|" * len(fams)]
        for name, alt in report["alternative_costs"].items():
            per = alt["gpu_seconds_per_iteration"]
            base_cost = per.get(report["baseline"])
            cells = []
            for fam in fams:
                rel = per[fam] / base_cost if base_cost else math.nan
                entry = {"speedup": alt["speedup"].get(fam, {}), "speedup_kind": alt["speedup_kind"].get(fam, {})}
                cells.append(f"{_f(rel, 2)}×, {_speed(entry, report['baseline'])}")
            L.append(f"| {name} | " + " | ".join(cells) + " |")
        L += [""] + [f"- {name}: {alt['title']}" for name, alt in report["alternative_costs"].items()] + [""]
    L += ["## Ranking fidelity", "",
          "Per iteration, on the selected seeds (score_final: proxy reward of the explore vs the reward of the "
          "regenerated full-precision sample; only families that regenerate), mean over seeds. The selected seeds "
          "are the extremes of each group, so these figures are not the paper's whole-group ones: the audit is.", ""]
    if report["fidelity_selected"]:
        L += ["| family | iteration | Spearman within prompt | Kendall within prompt | Spearman pooled | "
              "Kendall pooled |", "|---|---:|---:|---:|---:|---:|"]
        for fam, rows in report["fidelity_selected"].items():
            for r in rows:
                L.append(f"| {fam} | {r['iteration']} | {_f(r['spearman_within_prompt'], 3)} | "
                         f"{_f(r['kendall_within_prompt'], 3)} | {_f(r['spearman'], 3)} | {_f(r['kendall'], 3)} |")
    else:
        L.append("(no family regenerates: no selected-seed fidelity)")
    L += ["", "### Full-fidelity audit (whole explore pool regenerated at full precision)", ""]
    if report["audits"]:
        L += ["Spearman/Kendall of the proxy reward against the full-precision reward over whole prompt groups "
              "(within prompt: mean over groups; pooled: all candidates), and the mean fraction of the K/2 best "
              "(worst) seeds by proxy that are also among the K/2 best (worst) at full precision.", "",
              "| family | iteration | explore | seeds | Spearman within | Kendall within | Spearman pooled | "
              "Kendall pooled | top-K/2 overlap | bottom-K/2 overlap |",
              "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for fam, rows in report["audits"].items():
            for r in rows:
                L.append(f"| {fam} | {r['iteration']} | {r['explore']} | {r['seeds']} | "
                         f"{_f(r['spearman_within_prompt'], 3)} | {_f(r['kendall_within_prompt'], 3)} | "
                         f"{_f(r['spearman_pooled'], 3)} | {_f(r['kendall_pooled'], 3)} | "
                         f"{_f(r['topk_overlap'], 3)} | {_f(r['bottomk_overlap'], 3)} |")
    else:
        L.append("(no audits in this benchmark)")
    L += ["", f"![ranking fidelity]({plots['fidelity.png']})", ""]
    L += ["", "## Runs", "", "| run | directory | iterations | MLflow run |", "|---|---|---:|---|"]
    for key, r in report["runs"].items():
        L.append(f"| {key} | `{r['run_dir']}` | {r['iterations']} | {r['mlflow_run_id'] or '–'} |")
    L.append("")
    return "\n".join(L)


def _json_safe(x):
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (np.floating, np.integer)):
        return _json_safe(x.item())
    return x


def build_report(runs, bench, out_dir: str | Path, pricer: Callable | None = None,
                 command: str | None = None, alternatives: dict[str, Callable] | None = None) -> dict:
    """Analyse the runs, draw the plots, write `report.md` and `report.json` into `out_dir`.

    Returns the report dict with `files` (every path written). `pricer` defaults to `PlannerPricer` built from
    the bench config's `cost` section, `alternatives` to one per `cost.compare` model (only when `pricer` is
    defaulted too)."""
    out = Path(out_dir)
    plot_dir = out / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    c = bench.cost
    if pricer is None:
        pricer = PlannerPricer(c.model, c.gpu, c.gpus, c.utilisation)
        if alternatives is None:
            alternatives = {m: PlannerPricer(m, c.gpu, c.gpus, c.utilisation) for m in c.compare if m != c.model}
    report = analyse(runs, bench, pricer, alternatives)
    plots = {}
    for name, draw in PLOTS.items():
        path = plot_dir / name
        draw(report, path)
        plots[name] = f"plots/{name}"
    text = format_markdown(report, plots, command)
    md = out / "report.md"
    tmp = md.with_name("report.md.tmp")
    tmp.write_text(text)
    os.replace(tmp, md)
    report = _json_safe(report)
    write_json_atomic(out / "report.json", report)
    report["files"] = [str(md), str(out / "report.json"), *[str(plot_dir / n) for n in PLOTS]]
    return report
