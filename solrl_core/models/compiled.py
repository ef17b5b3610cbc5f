"""Compiled sampling copies: the explore copy, the regenerated samples' copy, the evaluation's and the audit's
transformer run through `torch.compile` (`model.compile`).

Each stage makes a new copy of the transformer (a new iteration's merged θ_old, its quantized explore copy), so the
compiled code must outlive the copy: `nn.Module.compile` compiles the module's call, torch's compiled-code cache is
keyed by that code and by guards on the module's structure, and its parameters are the graph's inputs (dynamo
inlines nn.Modules), so the next iteration's copy of the same structure runs the code compiled for the first one.

When it compiles again, per process: once for each (copy structure, input shape) it has not seen, which in a run is
a few (the explore copy's and the full-precision copy's structures, × the explore, regenerate and evaluation batch
sizes and each pool's smaller last batch, × 2 inputs under classifier-free guidance); never per batch or per copy
(`RECOMPILE_LIMIT` leaves room for them all; `dynamic=False`: each shape gets its own static kernels).

Not compiled: a copy with a step cache (TaylorSeer's hooks keep Python state per denoising step, which compiled code
would recompile for at every step), and a copy on fake tensors (the fake-CUDA tier: dynamo asks the CUDA driver for
its streams and generator state, which a faked device cannot answer): those run eager, as with `model.compile: false`.
"""

from __future__ import annotations

import torch

from solrl_core.models.step_cache import caching
from solrl_core.models.step_precision import models_of

RECOMPILE_LIMIT = 64  # compiled variants per code object: every (structure, shape) of a run, with room to spare
GPU_MODE = "max-autotune-no-cudagraphs"  # UniRL's Sol-RL scouts; CUDA graphs would pin one copy's weight addresses


def compile_enabled(model_cfg) -> bool:
    """`model.compile`: true, false, or auto (on a CUDA device, as the reference compiles its inference copies;
    off on a CPU, where a demo run of 24 iterations only breaks even: docs/lab/compile-2026-11-29.md)."""
    if model_cfg.compile == "auto":
        return torch.device(model_cfg.device).type == "cuda"
    return bool(model_cfg.compile)


def compile_mode(model_cfg) -> str:
    """`model.compile_mode`, or by device: autotuned kernels without CUDA graphs on a GPU, inductor's default on a CPU."""
    if model_cfg.compile_mode is not None:
        return model_cfg.compile_mode
    return default_mode(model_cfg.device)


def default_mode(device: str) -> str:
    """The compile mode on `device` when `model.compile_mode` is null."""
    return GPU_MODE if torch.device(device).type == "cuda" else "default"


def _on_fake_tensors(module: torch.nn.Module) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return any(isinstance(p, FakeTensor) for p in module.parameters())


def compilable(module: torch.nn.Module) -> bool:
    """Whether this copy can run compiled (see the module's docstring for those that cannot)."""
    return not caching(module) and not _on_fake_tensors(module)


def compiled_copy(transformer: torch.nn.Module, model_cfg) -> torch.nn.Module:
    """`transformer` (a sampling copy: every model of a step-selective one) compiled in place when `model.compile`
    says so and the copy can be; returned for chaining. Only this copy's calls go through the compiled code."""
    if not compile_enabled(model_cfg):
        return transformer
    for model in models_of(transformer):
        if compilable(model):
            compile_in_place(model, model_cfg.compile_backend, compile_mode(model_cfg))
    return transformer


def compile_in_place(module: torch.nn.Module, backend: str = "inductor", mode: str | None = None) -> None:
    """`nn.Module.compile` of `module` with static shapes, room for every variant a run compiles (`RECOMPILE_LIMIT`),
    and `mode` for inductor (the other backends take none)."""
    limits = torch._dynamo.config
    limits.recompile_limit = max(limits.recompile_limit, RECOMPILE_LIMIT)
    limits.accumulated_recompile_limit = max(limits.accumulated_recompile_limit, 4 * RECOMPILE_LIMIT)
    options = {"mode": mode} if backend == "inductor" and mode else {}
    module.compile(backend=backend, dynamic=False, **options)


def is_compiled(module: torch.nn.Module) -> bool:
    """Whether calls of `module` go through compiled code (`nn.Module.compile`)."""
    return getattr(module, "_compiled_call_impl", None) is not None
