"""Caches that skip transformer work between denoising steps, from diffusers' own hooks (`ModelMixin.enable_cache`):
an explore policy's option (`explore.cache`). The explore copy gets the cache; nothing else does.

Only caches whose skipping follows the step schedule are offered: TaylorSeer (`taylorseer`) computes the hooked
modules on a fixed schedule of steps and extrapolates their outputs on the others (a Taylor series in the step), so
a candidate's sample does not depend on the batch it is drawn in and the loop never reads a value back. Data-
dependent caches (First-Block Cache, MagCache, SeaCache) decide from a residual read back each step: a host sync per
step, and one decision for the whole batch, which would make a seed's sample depend on its batch mates (docs/
method.md, "Explore policies").

A sampling run starts with `fresh_trajectories` (the cache's state is per denoising run) and calls the model of
step i inside `step_context` (diffusers' `cache_context`, what its pipelines do).
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext

import torch

from solrl_core.errors import ConfigError

CACHES = ("none", "taylorseer")


def cache_config(kind: str, options: dict):
    """diffusers' config object of cache `kind` with `options` (its fields); None for "none". ConfigError in one line
    for an unknown kind or option. TaylorSeer keeps its factors in float32 (diffusers' default bf16 would round the
    extrapolation on a float32 CPU run)."""
    if kind == "none":
        return None
    if kind != "taylorseer":
        raise ConfigError(f"explore.cache.kind '{kind}' is not a cache (known: {', '.join(CACHES)})")
    from diffusers import TaylorSeerCacheConfig

    fields = {f.name for f in dataclasses.fields(TaylorSeerCacheConfig)} - {"taylor_factors_dtype"}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ConfigError(f"explore.cache.options: '{unknown[0]}' is not a TaylorSeer option (known: "
                          f"{', '.join(sorted(fields))})")
    return TaylorSeerCacheConfig(**options, taylor_factors_dtype=torch.float32)


def enable_step_cache(transformer: torch.nn.Module, kind: str, options: dict) -> torch.nn.Module:
    """`transformer` with cache `kind` enabled (in place; "none" leaves it as it is)."""
    config = cache_config(kind, options)
    if config is None:
        return transformer
    if not hasattr(transformer, "enable_cache"):
        # diffusers' SD3 and SANA transformers (0.42) do not mix in CacheMixin, though its hooks work on any module:
        # this private copy's class gains it, so the cache is enabled, set and reset by diffusers' own methods
        from diffusers.models.cache_utils import CacheMixin

        cls = type(transformer)
        transformer.__class__ = type(cls.__name__, (cls, CacheMixin), {"__module__": cls.__module__})
    transformer.enable_cache(config)
    return transformer


def caching(transformer: torch.nn.Module) -> bool:
    return bool(getattr(transformer, "is_cache_enabled", False))


def fresh_trajectories(transformer: torch.nn.Module) -> None:
    """Forget the previous sampling run's cached outputs: each batch is a new set of trajectories (diffusers'
    pipelines do this at the end of every call, `maybe_free_model_hooks`)."""
    if caching(transformer):
        transformer._reset_stateful_cache()


def step_context(transformer: torch.nn.Module, step: int, steps: int, sigma: float):
    """The context of the model call at step `step` of `steps` (sigma a float of the schedule: no device read)."""
    if not caching(transformer):
        return nullcontext()
    return transformer.cache_context("cond", step_index=step, num_inference_steps=steps, sigma=sigma)
