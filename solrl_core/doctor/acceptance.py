"""``python -m solrl_core.doctor.acceptance --out DIR``: what a bare GPU machine runs, in one report (docs/gpu.md).

Steps, each recorded pass or fail with its error line, a failing step never stopping the next:

1. ``bench MODEL`` for each ``--bench`` model (default flux1, sd35l, sana): `solrl doctor --gpu-bench`'s
   measurement (``gpu_bench.run_bench``, in this process) — as many blocks as fit, at the explore batch;
2. ``make tiny-MODEL`` for each tiny run subject: the tiny random-weight model `solrl make-tiny MODEL` writes
   (``models.backbones.tiny.make_tiny_model``), in DIR/tiny-MODEL;
3. ``run SUBJECT PRECISION`` for each ``--runs`` subject (default: the config's own model, ``embedded``, and
   ``tiny-flux1``) and each ``--precisions`` explore precision (default fp8, then nvfp4_emulated): ``--iterations``
   iterations (default 2) through the stage registry and one evaluation (``acceptance_runs.run_training``), with
   ``model.device`` the device and, on CUDA, ``model.dtype`` the official presets' (configs/parts/official.yaml).

The report, DIR/acceptance.json and DIR/acceptance.md, is rewritten after every step (acceptance_report.py). Exit
status 0 when every step passed, 1 otherwise, 2 for a usage error (no CUDA device, say). Imports neither Prefect
nor MLflow.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import get_args

import torch

from solrl_core.doctor.acceptance_runs import EMBEDDED, TINY_PREFIX, tiny_model_of
from solrl_core.doctor.cli import positive_int
from solrl_core.errors import SolrlError

BENCH_MODELS = ("flux1", "sd35l", "sana")
RUN_SUBJECTS = (EMBEDDED, f"{TINY_PREFIX}flux1")
RUN_PRECISIONS = ("fp8", "nvfp4_emulated")
ITERATIONS = 2


def default_config() -> Path:
    from solrl_core.config.packaged import CONFIGS_DIR

    return CONFIGS_DIR / "demo.yaml"


def official_dtype() -> str:
    """``model.dtype`` of the official presets (configs/parts/official.yaml): what the runs use on CUDA."""
    from solrl_core.config.schema import load_yaml
    from solrl_core.config.packaged import CONFIGS_DIR

    return load_yaml((CONFIGS_DIR / "parts" / "official.yaml").read_text())["model"]["dtype"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m solrl_core.doctor.acceptance",
                                description="what a bare GPU machine runs, in one report: benches and short "
                                "training runs (docs/gpu.md)")
    p.add_argument("--out", required=True, type=Path, help="report directory (acceptance.json/md, benches, runs)")
    p.add_argument("--bench", nargs="*", default=list(BENCH_MODELS), metavar="MODEL",
                   help=f"models to bench (default: {' '.join(BENCH_MODELS)}; none: --bench alone)")
    p.add_argument("--blocks", type=positive_int, default=None,
                   help="bench at most this many transformer blocks (default: as many as fit)")
    p.add_argument("--batch", type=positive_int, default=None,
                   help="bench batch (default: each model's official explore batch)")
    p.add_argument("--runs", nargs="*", default=list(RUN_SUBJECTS), metavar="SUBJECT",
                   help=f"run subjects: {EMBEDDED} (the config's model) or {TINY_PREFIX}MODEL (a make-tiny model) "
                   f"(default: {' '.join(RUN_SUBJECTS)}; none: --runs alone)")
    from solrl_core.config.schema import Precision

    p.add_argument("--precisions", nargs="+", default=list(RUN_PRECISIONS), choices=get_args(Precision),
                   metavar="PRECISION",
                   help=f"explore precision of each run (default: {' '.join(RUN_PRECISIONS)})")
    p.add_argument("--iterations", type=positive_int, default=ITERATIONS, help=f"per run (default {ITERATIONS})")
    p.add_argument("--config", type=Path, default=None, help="run config (default: configs/demo.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for every run, after the acceptance's own")
    p.add_argument("--no-eval", action="store_true", help="no evaluation after a run's last iteration")
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: the whole path on a CPU, for tests
    # measure()'s keyword arguments as JSON (tests: a tiny transformer config, few tokens, one repeat)
    p.add_argument("--bench-options", type=json.loads, default={}, help=argparse.SUPPRESS)
    return p


def _step(report, name: str, kind: str, body, device: str, **fields) -> dict:
    """Run ``body(step)`` as the report's step ``name``: timed, any exception recorded (never raised)."""
    from solrl_core.doctor.acceptance_report import failure
    from solrl_core.doctor.gpu_bench import free_memory

    step = {"kind": kind, **fields, "ok": False}
    report.start(name)
    print(f"acceptance: {name} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        body(step)
        step["ok"] = True
    except Exception as exc:  # noqa: BLE001 - a failing step is recorded, and the next one runs
        step.update(failure(exc))
    step["seconds"] = round(time.perf_counter() - start, 3)
    free_memory(device)
    report.finish(name, step)
    print(f"acceptance: {name}: {'pass' if step['ok'] else 'FAIL: ' + step['error']} ({step['seconds']:.1f} s)",
          file=sys.stderr, flush=True)
    return step


def check_names(bench: list[str], runs: list[str]) -> None:
    """SolrlError (a usage error, before any step) for a bench model the planner does not know or a run subject
    that is neither the config's model nor a model make-tiny writes."""
    from solrl_core.models.backbones.tiny import tiny_spec
    from solrl_core.planner.flops import get_model

    for model in bench:
        get_model(model)
    for subject in runs:
        if subject != EMBEDDED and tiny_model_of(subject) is None:
            raise SolrlError(f"unknown run subject '{subject}': {EMBEDDED} or {TINY_PREFIX}MODEL (e.g. tiny-flux1)")
        if tiny_model_of(subject):
            tiny_spec(tiny_model_of(subject))


def run_acceptance(args, argv: list[str]) -> tuple[dict, list[str]]:
    """Every step of ``args`` (see ``parser``) into the report in ``args.out``; (the report's data, the names of the
    steps this call ran)."""
    from solrl_core.doctor.acceptance_report import Report
    from solrl_core.doctor.acceptance_runs import run_overrides, run_training, tiny_overrides
    from solrl_core.doctor.gpu_bench import run_bench

    out = args.out.resolve()
    device = args.device
    cuda = torch.device(device).type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SolrlError("the GPU acceptance needs a CUDA GPU and this machine has none (docs/gpu.md)")
    check_names(args.bench, args.runs)
    config = args.config or default_config()
    dtype = official_dtype() if cuda else None
    report = Report(out, argv, device)
    names = []

    for model in args.bench:
        def bench(step, model=model):
            step["report"] = run_bench(out / "bench" / model, model, device, blocks=args.blocks, batch=args.batch,
                                       **args.bench_options)

        names.append(f"bench {model}")
        _step(report, names[-1], "bench", bench, device, model=model)

    tiny_dirs = {}
    for subject in dict.fromkeys(s for s in args.runs if tiny_model_of(s)):
        def make(step, subject=subject):
            from solrl_core.models.backbones.tiny import make_tiny_model

            tiny_dirs[subject] = make_tiny_model(tiny_model_of(subject), out / subject).resolve()
            step["dir"] = str(tiny_dirs[subject])

        names.append(f"make {subject}")
        _step(report, names[-1], "make", make, device, subject=subject)

    for subject in args.runs:
        for precision in args.precisions:
            def run(step, subject=subject, precision=precision):
                from solrl_core.config.loading import load_config

                overrides = []
                if tiny_model_of(subject):
                    if subject not in tiny_dirs:
                        raise SolrlError(f"not run: making {subject} failed (step 'make {subject}')")
                    overrides = tiny_overrides(tiny_model_of(subject), tiny_dirs[subject])
                overrides += run_overrides(args.iterations, device, dtype, precision) + list(args.set)
                step["overrides"] = overrides
                cfg = load_config(config, overrides)
                step["model"] = {"kind": cfg.model.kind, "device": cfg.model.device, "dtype": cfg.model.dtype}
                run_training(out / "runs" / f"{subject}-{precision}", cfg, args.iterations, not args.no_eval, step)

            names.append(f"run {subject} {precision}")
            _step(report, names[-1], "run", run, device, subject=subject, precision=precision, config=str(config))
    return report.data, names


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    try:
        data, names = run_acceptance(args, argv)
    except SolrlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from solrl_core.doctor.acceptance_report import JSON_NAME, MD_NAME

    print((args.out / MD_NAME).read_text(), end="")
    print(f"wrote {args.out / JSON_NAME} and {MD_NAME}", file=sys.stderr)
    return 0 if all(data["steps"][name]["ok"] for name in names) else 1


if __name__ == "__main__":
    raise SystemExit(main())
