"""Cost commands: predicted seconds per stage (plan) and the four families trained side by side (bench)."""

from __future__ import annotations

import json
from pathlib import Path

from solrl.cli.commands.options import output_options, protocol_options, show_progress
from solrl.flows.prefect_server import client_env, prefect_api
from solrl.flows.service_checks import check_services
from solrl_core.models.backbones.registry import full_size_models
from solrl_core.errors import SolrlError
from solrl_core.wording import plural


def cmd_plan(args) -> int:
    from solrl_core.planner.calibration import load_calibration

    cal = load_calibration(args.calibration) if args.calibration else None
    if args.paper:
        from solrl_core.planner.compare import compare, format_markdown

        print(format_markdown(compare(args.gpu or "b200", args.gpus, args.utilisation, calibration=cal),
                              "solrl plan --paper"))
        return 0
    if not args.target or not args.gpu:
        raise SolrlError("solrl plan needs CONFIG or MODEL and --gpu NAME (e.g. solrl plan demo --gpu b200, solrl "
                         "plan flux1 --gpu b200), or --paper")
    from solrl_core.planner.cost_model import FAMILIES, format_plan, plan

    if args.target.endswith((".yaml", ".yml")) or args.target not in full_size_models():  # a file or a config name
        from solrl_core.config.loading import load_config
        from solrl_core.planner.config_plan import plan_config

        if args.family and args.family not in FAMILIES:
            raise SolrlError(f"unknown family '{args.family}'; known: {', '.join(FAMILIES)}")
        result = plan_config(load_config(args.target, args.set or []), args.gpu, gpus=args.gpus,
                             utilisation=args.utilisation, model=args.model, calibration=cal,
                             price_per_gpu_hour=args.price)
        if args.family:
            result["families"] = {args.family: result["families"][args.family]}
            result["run"] = {args.family: result["run"][args.family]}
    else:
        if args.model:
            raise SolrlError("--model prices a CONFIG's shapes on another backbone; with a model name, drop it")
        if args.price is not None:
            raise SolrlError(f"--price costs a CONFIG's whole run (its iterations and evaluations); give a config, "
                             f"e.g. solrl plan {args.target}_sol_rl_pickscore --gpu {args.gpu} --price {args.price:g}")
        result = plan(args.target, args.gpu, family=args.family, gpus=args.gpus, utilisation=args.utilisation,
                      calibration=cal)
    print(json.dumps(result, indent=2) if args.json else format_plan(result))
    return 0


def cmd_bench(args) -> int:
    from solrl_core.bench.bench_config import bench_runs, load_bench_config
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_preflight import preflight

    overrides = list(args.set or [])
    bench, base_dir = load_bench_config(args.config, overrides, quick=args.quick)  # a file or a packaged name
    runs = bench_runs(bench, base_dir, args.run_dir)
    root = RunDir(args.run_dir or bench.run_root)
    command = " ".join(["solrl", "bench", str(args.config), *(["--quick"] if args.quick else []),
                        *[f"--set {o}" for o in overrides]])
    if args.report_only:
        from solrl.flows.tracking import log_bench_report, tracking_uri
        from solrl_core.bench.report import build_report

        done = [r for r in runs if RunDir(r.run_dir).config_path.is_file()]
        if not done:
            raise SolrlError(f"no benchmark runs under {root.root} yet; run: {command}")
        with root.hold():
            report = build_report(done, bench, root.root, command=command + " --report-only")
            report["mlflow"] = log_bench_report(root.root, tracking_uri(done[0].cfg), bench.tracking.experiment,
                                                report, [Path(p) for p in report["files"]])
    else:
        root.check_writable()
        client_env()
        check_services(runs[0].cfg)
        for label in dict.fromkeys(r.label for r in runs):
            preflight(next(r.cfg for r in runs if r.label == label))
        with root.hold():
            api = prefect_api()
            from solrl.flows.bench import bench_flow

            with api.ready():
                report = bench_flow(str(args.config), overrides, args.run_dir, progress=show_progress(args),
                                    command=command, quick=args.quick)
    print(f"\nbenchmark '{bench.name}' ({bench.protocol} protocol): {plural(len(runs), 'run')} "
          f"({plural(bench.seeds, 'seed')} x "
          f"{plural(len(report['families']), 'family', 'families')}, {plural(bench.iterations, 'iteration')})")
    print(f"{'family':<16} {'final eval reward':>22}   modeled GPU-s to target (speed-up vs {bench.baseline})")
    for fam, d in report["families"].items():
        std = d.get("final_reward_std")
        final = "-" if d.get("final_reward") is None else f"{d['final_reward']:.4f}"
        final += f" +/- {std:.4f}" if std is not None else ""
        gpu = d.get("time_to_target", {}).get("gpu", {})
        cost = "not reached" if gpu.get("cost") is None else f"{gpu['cost']:.4g}"
        speed = gpu.get("speedup", {}).get(bench.baseline)
        print(f"{fam:<16} {final:>22}   {cost}" + ("" if speed is None else f" ({speed:.2f}x)"))
    for claim in report.get("claims", []):
        print(f"verdict: {claim['verdict']:<26} {claim['claim']}")
    print(f"report        : {root.root / 'report.md'}")
    print(f"MLflow run    : {report['mlflow']['mlflow_run_id']} at {report['mlflow']['tracking_uri']}")
    return 0


def _price(text: str) -> float:
    """A price per GPU-hour: a finite number above 0 (argparse reports anything else in one line)."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a price: give a number above 0, e.g. 2.5")
    return value


def register(sub) -> None:
    p = sub.add_parser("plan", help="predict seconds per stage and iteration of each family on a GPU",
                       description="Count the FLOPs of one forward of a full-size backbone (meta device, no weights) "
                       "and predict each family's seconds per stage on a GPU from its published dense throughput "
                       "at a stated utilisation, at a run config's per-iteration sizes (CONFIG) or the official "
                       "ones (MODEL). With a CONFIG it also states each stage's memory per GPU and what the run "
                       "writes to its run directory per iteration and in all, and the whole run: its iterations, "
                       "evaluations and audits in wall-clock hours on the GPUs, GPU-hours and, with --price, cost, per "
                       "family. --paper compares the predictions with the paper's iteration times.")
    p.add_argument("target", nargs="?", metavar="CONFIG|MODEL",
                   help="a run config, a file or a packaged name (its backbone and per-iteration sizes; the other "
                   "families at the same sizes; `solrl presets` lists the names) or a model: "
                   + " | ".join(full_size_models()) + " (official sizes)")
    p.add_argument("--model", help="with CONFIG: price its sizes on this backbone instead (flux1, sd35l, ...)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="with CONFIG: override a config key")
    p.add_argument("--gpu", help="b200, gb200, b300, h100, h200, a100, rtx-pro-6000, rtx-5090, l40s, ...")
    p.add_argument("--family", help="one family only (default: all four)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per iteration (default 8, as the paper)")
    p.add_argument("--price", type=_price, metavar="USD_PER_GPU_HOUR",
                   help="with CONFIG: the price of one GPU-hour, to cost each family's whole run (e.g. 2.5)")
    p.add_argument("--utilisation", type=float, default=None, help="fraction of peak throughput (default 0.4)")
    p.add_argument("--paper", action="store_true", help="the paper's three models against its reported times")
    p.add_argument("--calibration", metavar="REPORT_JSON",
                   help="price with the throughput `solrl doctor --gpu-bench` measured (its report.json)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("bench", help="train the four families side by side and write a comparison report",
                       description="Train every family config of a bench config (baseline, naive_scaling, "
                       "naive_quant, sol_rl) with the same prompts, seeds and iteration count, once per run seed, "
                       "into <run-dir>/<family>-s<seed>/ (runs resume), then write <run-dir>/report.md with PNG plots "
                       "and report.json, and log them to MLflow: held-out eval reward against iterations, measured "
                       "CPU seconds and modeled GPU cost; time to reach the baseline's final reward and the speed-ups; "
                       "final rewards with their spread over seeds; ranking fidelity per iteration and the "
                       "full-fidelity audits; 95% intervals over training seeds (Student t, Hall's skewness-corrected "
                       "t, Fieller's for ratios: closed-form, no resampling), paired differences, the per-seed "
                       "numbers, a verdict per claim of the method and each interval's simulated coverage. "
                       "configs/bench.yaml takes about 55 minutes on 2 CPU cores; --quick runs its smaller "
                       "protocol (under 15 minutes).")
    protocol_options(p, "bench", "bench")
    output_options(p, no_progress=True)
    p.set_defaults(func=cmd_bench)
