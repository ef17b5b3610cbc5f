"""The doctor's arguments and what running them does, shared by `solrl doctor` and `python -m solrl_core.doctor`
(the latter imports neither Prefect nor MLflow: it runs on a bare GPU machine with the package installed)."""

from __future__ import annotations

import argparse
import json
import sys

from solrl_core.models.backbones.registry import full_size_models

DEFAULT_OUT = "doctor-report"


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--gpu-bench", action="store_true",
                   help="measure a full-size backbone (random weights, the run's dtype, the explore batch) per "
                   "precision; write report.json/md")
    p.add_argument("--model", default="flux1", help="with --gpu-bench: " + " | ".join(full_size_models()) + " (default flux1)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"with --gpu-bench: output directory (default {DEFAULT_OUT})")
    p.add_argument("--blocks", type=positive_int, default=None,
                   help="with --gpu-bench: at most this many transformer blocks (default: the whole model, halved "
                   "while it does not fit)")
    p.add_argument("--batch", type=positive_int, default=None,
                   help="with --gpu-bench: samples per timed forward (default: the explore batch of the model's "
                   "official preset, explore.batch_size)")
    p.add_argument("--planner-gpu", default=None,
                   help="with --gpu-bench: the planner's name of this GPU (default: read from the device name)")
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # the bench on cpu, for tests


def run(args) -> int:
    """Print the doctor's lines (or JSON); with --gpu-bench, measure and write the report. SolrlError propagates."""
    if args.gpu_bench:
        from solrl_core.doctor.gpu_bench import format_markdown, run_bench

        report = run_bench(args.out, args.model, args.device, args.planner_gpu, blocks=args.blocks, batch=args.batch)
        print(json.dumps(report, indent=2) if args.json else format_markdown(report), end="")
        print(f"wrote {args.out}/report.json and report.md", file=sys.stderr)
        return 0
    from solrl_core.doctor.probe import checks, format_checks, report

    print(json.dumps(report(), indent=2) if args.json else format_checks(checks()))
    return 0


def main(argv: list[str] | None = None) -> int:
    from solrl_core.errors import SolrlError

    parser = argparse.ArgumentParser(prog="python -m solrl_core.doctor",
                                     description="what this machine runs; --gpu-bench measures it")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except SolrlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
