"""The whole run of a config on the plan's GPUs: how long, how many GPU-hours and, given a price, how much.

Per family, at the config's iteration count (``cfg.iterations``) and with the same counted FLOPs and throughput as
the per-iteration plan (``cost_model``):

* iterations  = iterations × the family's seconds per iteration;
* evaluations = ``disk.evaluation_count`` evaluations (before training, every ``eval.every`` iterations, after the
                last), each ``eval.num_prompts`` × ``eval.seeds_per_prompt`` samples of ``eval.steps`` full-precision
                forwards plus their decode and reward;
* audits      = ``disk.audit_count`` audits, each the whole explore pool (P × N) regenerated at full precision at
                the regenerate's step count, decoded and scored;
* wall clock  = their sum (the GPUs work together on each stage; nothing overlaps), GPU-hours = wall clock × GPUs,
                cost = GPU-hours × the price per GPU-hour.

What the per-iteration plan leaves out (loading, text encoding, host overheads) is left out here too. No time to a
reward is stated: the paper reports its convergence as a ratio (``PAPER_CONVERGENCE``), not the iterations at which a
score is reached.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from solrl_core.planner.disk import audit_count, evaluation_count
from solrl_core.planner.flops import ForwardFlops

# Sol-RL reaches DiffusionNFT's final score in 1.9x to 4.64x fewer GPU-hours across the paper's 12 model x reward
# pairs (the paper, "What the paper reports" in docs/method.md); the iterations at which it does are not published.
PAPER_CONVERGENCE = (1.9, 4.64)


@dataclass(frozen=True)
class RunTotal:
    """One family's whole run: counts, seconds by part, GPU-hours and cost (None without a price)."""

    family: str
    iterations: int
    evaluations: int
    audits: int
    iterations_s: float
    evaluations_s: float
    audits_s: float
    gpus: int
    price_per_gpu_hour: float | None

    @property
    def wall_s(self) -> float:
        return self.iterations_s + self.evaluations_s + self.audits_s

    @property
    def gpu_hours(self) -> float:
        return self.wall_s / 3600 * self.gpus

    @property
    def cost(self) -> float | None:
        return None if self.price_per_gpu_hour is None else self.gpu_hours * self.price_per_gpu_hour

    def to_dict(self) -> dict:
        return {**asdict(self), "wall_s": self.wall_s, "gpu_hours": self.gpu_hours, "cost": self.cost}


def evaluation_seconds(cfg, fwd: ForwardFlops, tp, per_image_flops: float) -> float:
    """Seconds of one held-out evaluation: its samples' full-precision forwards, decodes and rewards (`tp`: the
    plan's `cost_model.Throughput`)."""
    samples = cfg.eval.num_prompts * cfg.eval.seeds_per_prompt
    return samples * (cfg.eval.steps * fwd.total + per_image_flops) / tp.rate("bf16")


def audit_seconds(shapes: dict, fwd: ForwardFlops, tp, per_image_flops: float) -> float:
    """Seconds of one audit: the whole explore pool regenerated at full precision, decoded and scored (`shapes`: a
    family's `cost_model.Shapes` as a dict, as its iteration cost holds it)."""
    samples = shapes["prompts"] * shapes["seeds"]
    return samples * (shapes["regenerate_steps"] * fwd.total + per_image_flops) / tp.rate("bf16")


def run_totals(cfg, costs: dict[str, dict], fwd: ForwardFlops, tp, per_image_flops: float,
               price_per_gpu_hour: float | None = None) -> dict[str, RunTotal]:
    """Each family's ``RunTotal`` from its per-iteration cost (``cost_model.iteration_cost``) and the config's
    iterations, evaluations and audits."""
    evaluations, audits = evaluation_count(cfg), audit_count(cfg)
    one_evaluation = evaluation_seconds(cfg, fwd, tp, per_image_flops)
    out = {}
    for family, cost in costs.items():
        shapes = cost["shapes"]
        out[family] = RunTotal(
            family=family, iterations=cfg.iterations, evaluations=evaluations, audits=audits,
            iterations_s=cfg.iterations * cost["seconds"]["iteration"], evaluations_s=evaluations * one_evaluation,
            audits_s=audits * audit_seconds(shapes, fwd, tp, per_image_flops), gpus=tp.gpus,
            price_per_gpu_hour=price_per_gpu_hour)
    return out


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.3g} s"


def format_run_totals(run: dict, gpus: int, gpu_title: str, config_family: str | None) -> str:
    """The whole-run section of `solrl plan CONFIG`: one row per family, the saving against the full-precision
    families, and what the paper says of convergence."""
    totals = [RunTotal(**{k: v for k, v in d.items() if k in RunTotal.__dataclass_fields__}) for d in run.values()]
    first = totals[0]
    price = first.price_per_gpu_hour
    counts = f"{first.iterations} iterations, {first.evaluations} evaluations" + (
        f", {first.audits} audits" if first.audits else "")
    lines = [f"Whole run ({counts}) on {gpus} x {gpu_title}:", "",
             "| family | iterations | evaluations and audits | wall clock | GPU-hours |"
             + (f" cost at {price:g} per GPU-hour |" if price is not None else ""),
             "|---|---:|---:|---:|---:|" + ("---:|" if price is not None else "")]
    for t in totals:
        row = (f"| {t.family}{' (this config)' if t.family == config_family else ''} | {_duration(t.iterations_s)} | "
               f"{_duration(t.evaluations_s + t.audits_s)} | {_duration(t.wall_s)} | {t.gpu_hours:.3g} |")
        lines.append(row + (f" {t.cost:,.2f} |" if t.cost is not None else ""))
    by_family = {t.family: t for t in totals}
    if {"sol_rl", "naive_scaling"} <= by_family.keys() and by_family["sol_rl"].gpu_hours > 0:
        sol, naive = by_family["sol_rl"], by_family["naive_scaling"]  # the same N seeds explored, in full precision
        lines.append(f"sol_rl saves {naive.gpu_hours - sol.gpu_hours:.3g} GPU-hours against naive_scaling at the same "
                     f"iterations ({naive.gpu_hours / sol.gpu_hours:.2f}x)")
    lo, hi = PAPER_CONVERGENCE
    lines.append(f"Time to a reward is not stated: the paper reports sol_rl reaching DiffusionNFT's final score in "
                 f"{lo}x to {hi}x fewer GPU-hours (12 model x reward pairs), not the iterations at which it does.")
    if price is None:
        lines.append("Give --price USD_PER_GPU_HOUR for the cost.")
    return "\n".join(lines)
