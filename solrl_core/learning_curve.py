"""What a finished training shows at its end: the held-out evaluations as a small table and a plot
(`learning_curve.png` in the run directory), one line per reward, the training reward (`reward`) and the gold
evaluator (`gold`, dashed) drawn thicker; the table also has `gold_gap`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.eval_metrics import GAP_KEY, GOLD_KEY, TOTAL_KEY
from solrl_core.run.storage import as_path, is_remote
from solrl_core.run.rundir import CURVE_FILE
from solrl_core.userfiles import FILE, entry_kind

__all__ = ["CURVE_FILE", "eval_table", "plot_eval_curve"]


def _names(evals: list[dict]) -> list[str]:
    """`reward` (the weighted evaluation reward) first, then each evaluation reward in the order first seen."""
    names = ["reward"]
    for e in evals:
        names += [k for k in e["metrics"] if k not in names]
    return names


def eval_table(evals: list[dict]) -> str:
    """The evaluations as text: one row per step, one column per reward, and the change from the first row."""
    names = _names(evals)
    width = max(len(n) for n in names) + 2
    lines = ["after N iterations".ljust(20) + "".join(n.rjust(width) for n in names)]
    for e in evals:
        lines.append(str(e["step"]).ljust(20) + "".join(
            f"{e['metrics'][n]:.4f}".rjust(width) if n in e["metrics"] else "-".rjust(width) for n in names))
    if len(evals) > 1:
        first, last = evals[0]["metrics"], evals[-1]["metrics"]
        lines.append("change".ljust(20) + "".join(
            f"{last[n] - first[n]:+.4f}".rjust(width) if n in first and n in last else "-".rjust(width)
            for n in names))
    return "\n".join(lines)


def plot_eval_curve(evals: list[dict], path: str | Path, title: str = "") -> Path:
    """A PNG at `path`: held-out reward against iterations, one line per distinct curve (metrics with the same values
    share a line and its label), the best evaluation of gold (else of the weighted reward) marked."""
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure registry is touched

    fig = Figure(figsize=(6, 3.6), dpi=110)
    ax = fig.subplots()
    steps = np.array([e["step"] for e in evals])
    marked = GOLD_KEY if any(GOLD_KEY in e["metrics"] for e in evals) else TOTAL_KEY  # the honest curve gets the marker
    series: list[tuple[list[str], np.ndarray]] = []  # one line per distinct curve, named by every metric it is
    for name in _names(evals):
        if name == GAP_KEY:  # a difference, not a reward: it stays in the table
            continue
        values = np.array([e["metrics"].get(name, np.nan) for e in evals], np.float64)
        same = next((names for names, v in series if np.array_equal(v, values, equal_nan=True)), None)
        if same is not None:  # e.g. the total of one reward, or gold that is a trained-on reward
            same.append(name)
        else:
            series.append(([name], values))
    for names, values in series:
        label = " = ".join({TOTAL_KEY: "reward (weighted)", GOLD_KEY: "gold evaluator"}.get(n, n) for n in names)
        bold = bool({TOTAL_KEY, GOLD_KEY} & set(names))
        ax.plot(steps, values, marker="o", ms=3, lw=2.2 if bold else 1.2, ls="--" if GOLD_KEY in names else "-",
                label=label)
        if marked in names and np.isfinite(values).any():
            best = int(np.nanargmax(values))
            ax.annotate(f"best {values[best]:.3f}", (steps[best], values[best]), textcoords="offset points",
                        xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xlabel("iterations trained (evaluation after N updates)")
    ax.set_ylabel("held-out reward (EMA weights)")
    ax.set_title(title or "held-out evaluation", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path = as_path(path)
    found = None if is_remote(path) else entry_kind(path)
    if found not in (None, FILE):  # e.g. a folder of that name: the run is complete, only its plot is not drawn
        raise SolrlError(f"{path} is {found}, where solrl draws the learning curve; move it away and run the same "
                         "command again (the run's work is done and kept: it only draws the plot)")
    with path.open("wb") as fh:  # the run directory may be remote (fsspec)
        fig.savefig(fh, format="png")
    return path
