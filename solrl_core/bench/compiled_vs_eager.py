"""Compiled against eager sampling copies (`model.compile`), on this machine: for the embedded model and every tiny
backbone, one sampling call of a full-precision copy and of the explore copy (NVFP4 emulated), eager and compiled
with inductor: the largest difference of the samples (relative to their spread), the first call's seconds (the
compile) and the median seconds of the calls after it.

    python -m solrl_core.bench.compiled_vs_eager [--models embedded flux1 ...] [--batch 8] [--steps 6] [--repeats 3]

Prints a markdown table; `--json PATH` keeps the numbers. Each model compiles in a fresh dynamo state (no cached code
from the one before; inductor's on-disk kernel cache may still serve a repeated run: clear TORCHINDUCTOR_CACHE_DIR
to time a first compile)."""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

EXPLORE_PRECISION = "nvfp4_emulated"


def _config(model: str, tmp: Path):
    from solrl_core.config.loading import load_config

    if model == "embedded":
        return load_config("demo", ["model.compile=true"])
    from solrl_core.tiny_bundle import make_tiny_bundle

    path = make_tiny_bundle(model, tmp / model)["dir"]
    return load_config(f"{model}_sol_rl_pickscore",
                       [f"model.path={path}", "model.device=cpu", "model.dtype=float32", "model.compile=true"])


TINY_MIN_WIDTH = 16  # the tiny backbones' layers are narrower than the presets' min widths (full-size models')


COPIES = ("fp32", EXPLORE_PRECISION)


def _copy(cfg, backbone, precision: str) -> torch.nn.Module:
    """A full-precision sampling copy ("fp32") or the explore copy (its eligible layers in emulated NVFP4; on a tiny
    backbone every layer at least `TINY_MIN_WIDTH` wide, so that the copy has quantized layers at all)."""
    from solrl_core.models.quant.backends import apply_backend
    from solrl_core.models.quant.linear import explore_rule
    from solrl_core.stages.transformer_copies import merged_transformer

    explore = merged_transformer(backbone, {})
    if precision == "fp32":
        return explore
    skip, width = explore_rule(cfg.quant, backbone.defaults)
    width = width if cfg.model.kind == "embedded" else TINY_MIN_WIDTH
    report = apply_backend(explore, EXPLORE_PRECISION, skip, width, weight_fmt=cfg.quant.weight_format,
                           act_fmt=cfg.quant.act_format)
    if not any(layer.replaced for layer in report.layers):
        raise RuntimeError(f"{cfg.model.kind}: no layer of the explore copy was quantized")
    return explore


def _timed(call, repeats: int) -> tuple[torch.Tensor, float, float]:
    """(output, first call's seconds, median seconds of `repeats` more)."""
    start = time.perf_counter()
    out = call()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return out, first, statistics.median(times)


def measure(model: str, batch: int, steps: int, repeats: int, tmp: Path, backend: str = "inductor") -> list[dict]:
    from solrl_core.models.backbones.registry import load_backbone
    from solrl_core.models.compiled import compiled_copy
    from solrl_core.models.sampler import sample

    cfg = _config(model, tmp)
    cfg.model.compile_backend = backend
    backbone = load_backbone(cfg.model)
    prompts = ["a red circle"] * batch
    cond = backbone.encode_prompts(prompts)
    noise = backbone.initial_noise(list(range(batch)))
    rows = []
    for precision in COPIES:
        torch._dynamo.reset()
        run = lambda copy_: (lambda: sample(backbone, copy_, cond, noise, steps).x0)  # noqa: E731
        copy_ = _copy(cfg, backbone, precision)
        eager, _, eager_s = _timed(run(copy_), repeats)
        compiled = compiled_copy(copy_, cfg.model)  # in place: its calls go through the compiled code from now
        out, compile_s, compiled_s = _timed(run(compiled), repeats)
        spread = float(eager.std())
        rows.append({"model": model, "copy": precision, "batch": batch, "steps": steps,
                     "max_abs_diff": float((out - eager).abs().max()), "sample_std": spread,
                     "rel_diff": float((out - eager).abs().max()) / spread if spread else 0.0,
                     "mean_rel_diff": float((out - eager).abs().mean()) / spread if spread else 0.0,
                     "eager_s": eager_s, "first_compiled_call_s": compile_s, "compiled_s": compiled_s,
                     "speedup": eager_s / compiled_s if compiled_s else float("nan")})
    return rows


def format_rows(rows: list[dict]) -> str:
    lines = ["| model | copy | max abs diff (× sample sd) | mean abs diff × sample sd | eager s | first compiled call s | "
             "compiled s | speed-up |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['copy']} | {r['max_abs_diff']:.2e} ({r['rel_diff']:.1e}) | "
                     f"{r['mean_rel_diff']:.1e} | "
                     f"{r['eager_s']:.3f} | {r['first_compiled_call_s']:.1f} | {r['compiled_s']:.3f} | "
                     f"{r['speedup']:.2f}× |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from solrl_core.models.backbones.tiny import tiny_models

    known = ["embedded", *tiny_models()]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=known, choices=known, help="models to measure (default: all)")
    parser.add_argument("--batch", type=int, default=8, help="samples per call (default 8)")
    parser.add_argument("--steps", type=int, default=6, help="sampling steps (default 6, the explore's)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls after the first (default 3)")
    parser.add_argument("--backend", default="inductor",
                        help="torch.compile backend (default inductor, what a run uses; aot_eager traces without "
                        "generating kernels: a check of the tracing in seconds)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="solrl-compile-") as tmp:
        for model in args.models:
            rows += measure(model, args.batch, args.steps, args.repeats, Path(tmp), args.backend)
            print(f"{model}: measured", flush=True)
    print(format_rows(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
