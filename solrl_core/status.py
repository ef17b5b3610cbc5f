"""Where a run stands, as `solrl status` prints it: target and completed iterations, each stage of each iteration,
stages left half-done, stages made stale by a re-run, the last held-out evaluation and where to look (run
directory, MLflow run)."""

from __future__ import annotations

from solrl_core.errors import DamagedArtifactError
from solrl_core.mlflow_links import run_link
from solrl_core.run.integrity import verify_stage
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run_config import load_run_config
from solrl_core.run.staleness import describe, recompute_command, stale_items
from solrl_core.wording import plural

MARKS = {"complete": "done", "partial": "part", "pending": "-", "stale": "stale", "damaged": "DAMAGED"}


def _damaged(run: RunDir, iteration: int, stage: str) -> str | None:
    """Why a complete stage's artifact is not what its manifest records (a file deleted, truncated: sizes only, a
    stat per file, nothing read), or None when it is."""
    try:
        verify_stage(run, iteration, stage, contents=False)
    except DamagedArtifactError as exc:
        return str(exc)
    return None


def run_status(run: RunDir) -> dict:
    """The run's state. `completed_iterations`: iterations from 0 whose update is complete, without a gap.
    `damaged`: complete stages whose artifact no longer matches its manifest (a file deleted or truncated; `solrl
    train` refuses them with the same line). `running`: the live process that holds the run ("pid 123 on host node1
    since ..."), or None. `interrupted`: stages with an artifact but no manifest while no process runs the run (a
    crash or a failure inside the stage; the next `solrl train` or `solrl stage` resumes or redoes them); while one
    does, those are `in_progress`. `stale`: completions computed from inputs that were computed again since
    (solrl_core/run/staleness.py; `solrl train` recomputes them); their stages show "stale"."""
    cfg = load_run_config(run)
    holder = run.holder()  # a live process runs it: its half-written stages are being written, not interrupted
    count = max([cfg.iterations, *[i + 1 for i in run.iterations_present()]])
    stages = [{s: run.stage_status(i, s) for s in STAGES} for i in range(count)]
    damaged = []
    for i, row in enumerate(stages):
        for s, st in row.items():
            why = _damaged(run, i, s) if st == "complete" else None
            if why is not None:
                row[s] = "damaged"
                damaged.append({"iteration": i, "stage": s, "why": why})
    stale = stale_items(run)
    for item in stale:
        if item["stage"] in STAGES:
            stages[item["iteration"]][item["stage"]] = "stale"
    completed = next((i for i, row in enumerate(stages) if row["update"] != "complete"), count)
    evaluations = run.evaluations()
    last = evaluations[-1] if evaluations else None
    return {
        "run_dir": str(run.root),
        "name": cfg.name,
        "target_iterations": cfg.iterations,
        "completed_iterations": completed,
        "running": holder,
        "interrupted": [] if holder else [{"iteration": i, "stage": s} for i, row in enumerate(stages)
                                          for s, st in row.items() if st == "partial"],
        "in_progress": [{"iteration": i, "stage": s} for i, row in enumerate(stages) for s, st in row.items()
                        if st == "partial"] if holder else [],
        "last_evaluation": None if last is None else {
            "step": last["step"], "metrics": last["metrics"], "ema": last.get("ema"),
            "samples": str(run.eval_dir(last["step"]) / "samples.png")},
        "evaluations": [{"step": e["step"], "reward": e["metrics"]["reward"]} for e in evaluations],
        "damaged": damaged,
        "stale": stale,
        "recompute": recompute_command(run),
        "eval_every": cfg.eval.every,
        "mlflow": run_link(run.run_info()),
        "iterations": [{"iteration": i, "stages": row} for i, row in enumerate(stages)],
    }


def status_text(data: dict) -> str:
    """`run_status` as lines for the terminal."""
    lines = [f"run          : {data['run_dir']}  (config '{data['name']}')",
             f"iterations   : {data['completed_iterations']} of {data['target_iterations']} complete"]
    if data["running"]:
        lines.append(f"running      : {data['running']}"
                     + "".join(f"; {i['stage']} of iteration {i['iteration']} in progress" for i in data["in_progress"]))
    for item in data["interrupted"]:
        lines.append(f"interrupted  : {item['stage']} of iteration {item['iteration']} (artifact without manifest; "
                     f"`solrl train` resumes it, or: solrl stage {item['stage']} --run-dir {data['run_dir']} "
                     f"--iteration {item['iteration']} --force)")
    lines += [f"damaged      : {item['why']}" for item in data["damaged"]]
    lines += stale_lines(data["stale"], data["recompute"])
    last = data["last_evaluation"]
    if last is None:
        why = "eval.every is 0" if not data["eval_every"] else f"every {plural(data['eval_every'], 'iteration')}"
        lines.append(f"evaluation   : none yet ({why}; `solrl eval --run-dir {data['run_dir']}` runs one)")
    else:
        metrics = {"reward": last["metrics"]["reward"], **last["metrics"]}  # the weighted total first
        lines.append(f"evaluation   : after {plural(last['step'], 'iteration')}: "
                     + ", ".join(f"{name} {value:.4f}" for name, value in metrics.items()))
        lines.append(f"               samples {last['samples']}")
        if len(data["evaluations"]) > 1:
            lines.append("               reward after N iterations: "
                         + ", ".join(f"{e['step']}: {e['reward']:.4f}" for e in data["evaluations"]))
    link = data["mlflow"]
    if link is None:
        lines.append("MLflow       : no MLflow run yet (`solrl train` creates it)")
    else:
        served = f" (served by {link['server']})" if link["server"] not in (None, link["tracking_uri"].rstrip("/")) \
            else ""
        lines.append(f"MLflow       : run {link['run_id']} at {link['tracking_uri']}{served}")
        if link["ui_command"]:
            lines.append(f"               no MLflow server serves it; start a UI: {link['ui_command']}")
        lines.append(f"               open: {link['url']}")
    lines.append("")
    lines.append("iter  " + "  ".join(f"{s:>13}" for s in STAGES))
    for row in data["iterations"]:
        lines.append(f"{row['iteration']:>4}  " + "  ".join(f"{MARKS[row['stages'][s]]:>13}" for s in STAGES))
    return "\n".join(lines)


def stale_lines(stale: list[dict], recompute: str, label: str = "stale") -> list[str]:
    """One line per re-run that made completions stale (naming them), and the command that recomputes them."""
    if not stale:
        return []
    by_cause: dict[tuple[str, bool], list[str]] = {}
    for item in stale:
        what = f"eval step {item['step']}" if item["stage"] == "eval" else f"{item['stage']} it{item['iteration']}"
        by_cause.setdefault((item["cause"], item["cause_missing"]), []).append(what)
    lines = [f"{label:<13}: {', '.join(names)} ("
             + (f"{describe(cause)} is missing)" if missing else f"computed before {describe(cause)} was run again)")
             for (cause, missing), names in by_cause.items()]
    return lines + [f"               `{recompute}` recomputes them"]
