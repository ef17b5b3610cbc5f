"""Wall time of one iteration on 1, 2, ... devices, side by side, and what the same split gives on GPUs by the planner.

    python -m solrl.flows.lab.devices_bench configs/demo.yaml --devices 1 2 [--kind cpu] [--plan NAME]

Each device count trains one iteration of CONFIG (`solrl train`, in a subprocess: its own Prefect flow and Dask
cluster) into a fresh temporary run directory with `orchestration.devices` = that many `--kind` devices, and reads
the stage seconds from the manifests (the evaluation is off: the iteration only). The planner part prices the
sampling stages of a full-size preset on one GPU and splits their batches over `--gpus` GPUs as the shard runner
does (whole batches: the slowest GPU has ceil(batches / gpus) of them). A figure, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from solrl_core.config.loading import load_config
from solrl_core.orphan_guard import guarded
from solrl_core.run.rundir import STAGES, RunDir


def measure(config: str, devices: int, kind: str, root: Path, overrides: list[str]) -> dict:
    """Train one iteration of `config` on `devices` devices of `kind`; its stage seconds and wall time."""
    run_dir = root / f"devices-{devices}"
    listed = ", ".join([kind] * devices if kind == "cpu" else [f"cuda:{k}" for k in range(devices)])
    sets = [f"orchestration.devices=[{listed}]", "iterations=1", "eval.every=0",
            f"tracking.uri=sqlite:///{root / 'mlruns.db'}", *overrides]
    command = [sys.executable, "-m", "solrl", "train", config, "--run-dir", str(run_dir), "--no-progress"]
    for item in sets:
        command += ["--set", item]
    start = time.perf_counter()
    subprocess.run(guarded(command), check=True, stdout=subprocess.DEVNULL)  # stops if this process is killed
    wall = time.perf_counter() - start
    run = RunDir(run_dir)
    summaries = {stage: run.manifest(0, stage)["summary"] for stage in STAGES}
    return {"devices": devices, "wall_s": wall, "iteration_s": sum(s["seconds"] for s in summaries.values()),
            "stages_s": {stage: s["seconds"] for stage, s in summaries.items()},
            "explore_shards_s": [shard["seconds"] for shard in summaries["explore"].get("shards", [])]}


def planned_split(preset: str, gpu: str, gpus: int) -> dict:
    """The planner's explore and regenerate seconds of `preset`'s sol_rl iteration on one GPU, and on `gpus` GPUs
    with the batches split as the shard runner splits them."""
    from solrl_core.planner.config_plan import plan_config

    cfg = load_config(preset)
    seconds = plan_config(cfg, gpu, gpus=1)["families"][cfg.family]["seconds"]
    rows = {"explore": cfg.prompts.per_iteration * cfg.explore.seeds_per_prompt,
            "regenerate": cfg.prompts.per_iteration * cfg.select.k}
    sizes = {"explore": cfg.explore.batch_size, "regenerate": cfg.regenerate.batch_size}
    out = {"preset": preset, "gpu": gpu, "gpus": gpus}
    for stage in ("explore", "regenerate"):
        batches = math.ceil(rows[stage] / sizes[stage])
        out[stage] = {"rows": rows[stage], "batches": batches, "one_gpu_s": seconds[stage],
                      "split_s": seconds[stage] * math.ceil(batches / gpus) / batches}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solrl.flows.lab.devices_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--kind", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--plan", default="flux1_sol_rl_pickscore",
                        help="full-size preset the planner prices (its sol_rl iteration)")
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="solrl-devices-") as tmp:
        rows = [measure(args.config, n, args.kind, Path(tmp), args.set) for n in args.devices]
    print(f"{args.config}, one iteration (evaluation off), {args.kind} devices")
    print("| devices | explore s | explore per shard s | score_explore s | regenerate s | score_final s | "
          "update s | iteration s (stages) | wall s (train command) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s = r["stages_s"]
        shards = " / ".join(f"{x:.1f}" for x in r["explore_shards_s"])
        print(f"| {r['devices']} | {s['explore']:.1f} | {shards} | {s['score_explore']:.1f} | {s['regenerate']:.1f} | "
              f"{s['score_final']:.1f} | {s['update']:.1f} | {r['iteration_s']:.1f} | {r['wall_s']:.1f} |")
    plan = planned_split(args.plan, args.gpu, args.gpus)
    print(f"\nplanner: {plan['preset']} (sol_rl) on {args.gpu}, batches split over {args.gpus} GPUs")
    print(f"| stage | rows | batches | 1 GPU s | {args.gpus} GPUs s | speed-up |")
    print("|---|---|---|---|---|---|")
    for stage in ("explore", "regenerate"):
        p = plan[stage]
        print(f"| {stage} | {p['rows']} | {p['batches']} | {p['one_gpu_s']:.1f} | {p['split_s']:.1f} | "
              f"{p['one_gpu_s'] / p['split_s']:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
