"""`solrl doctor`: what this machine runs (CUDA, Transformer Engine, FP8/NVFP4, auto choices); --gpu-bench measures."""

from __future__ import annotations


def register(sub) -> None:
    from solrl_core.doctor.cli import add_arguments, run

    p = sub.add_parser("doctor", help="what this machine runs: CUDA, Transformer Engine, FP8/NVFP4, auto choices",
                       description="One line each: CUDA devices and compute capability, Transformer Engine, FP8 and "
                       "NVFP4 support, what explore.precision auto and orchestration.devices auto pick and why. "
                       "--gpu-bench measures a full-size backbone per precision on a CUDA GPU, built in the run's "
                       "dtype and timed at its explore batch (report.json/md, read by `solrl plan --calibration`). "
                       "The GPU acceptance, benches and short runs in one report: python -m "
                       "solrl_core.doctor.acceptance (docs/gpu.md).")
    add_arguments(p)
    p.set_defaults(func=run)
