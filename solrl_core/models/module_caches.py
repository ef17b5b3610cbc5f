"""Method caches that die with their module.

Some diffusers modules memoize a method with a class-level `functools.lru_cache` (Qwen-Image's rotary embedding:
`QwenEmbedRope._compute_video_freqs` and `_get_device_freqs`, through `lru_cache_unless_export`). Such a cache is
keyed by `self`, so it keeps every instance it has seen alive, with the tensors it computed, for the life of the
process. The run makes a new transformer copy per iteration (the explore copy, the evaluation's policy): without this,
every dropped copy's rotary module and its frequency tables (~4.5 MiB each for Qwen-Image at 1024 px) stay on the GPU.

`own_method_caches` gives each such method of a module tree a cache of its own, on the instance, built by the same
decorator with the same size: the cache and the module refer to each other only, so the garbage collector frees
both when the copy is dropped. The class-level cache is left to the modules that never go away (the base model).
"""

from __future__ import annotations

import functools
import types

import torch


def _class_cache(function) -> object | None:
    """The `functools.lru_cache` object behind a class attribute (the attribute itself, or one held in the closure of
    a decorator that wraps it, as `lru_cache_unless_export` does); None for a plain method."""
    if hasattr(function, "cache_info"):
        return function
    for cell in getattr(function, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if hasattr(inner, "cache_info") and callable(inner):
            return inner
    return None


def _decorator_of(function):
    """A factory that wraps a function the way `function` was: diffusers' `lru_cache_unless_export` when it is its
    wrapper (so the instance cache is skipped while compiling or exporting, as the class one is), else a plain
    `functools.lru_cache`."""
    if getattr(getattr(function, "__code__", None), "co_name", None) == "inner_wrapper":
        from diffusers.utils.torch_utils import lru_cache_unless_export

        return lru_cache_unless_export
    return functools.lru_cache


@functools.cache
def _cached_methods(klass: type) -> tuple[tuple[str, object, object, int | None], ...]:
    """(name, the function to wrap, the decorator, the cache size) of each method `klass` memoizes with a class-level
    lru_cache, the most derived definition of each name."""
    found, seen = [], set()
    for owner in klass.__mro__:
        for name, attribute in vars(owner).items():
            if name in seen:
                continue
            seen.add(name)
            if isinstance(attribute, (staticmethod, classmethod, property)) or not callable(attribute):
                continue
            cache = _class_cache(attribute)
            if cache is not None:
                function = getattr(attribute, "__wrapped__", None) or cache.__wrapped__
                found.append((name, function, _decorator_of(attribute), cache.cache_info().maxsize))
    return tuple(found)


def own_method_caches(model: torch.nn.Module) -> torch.nn.Module:
    """Give every module of `model` whose class memoizes a method with a class-level lru_cache its own cache of the
    same size (module docstring); a copy of a module that had one gets a new one. Returns `model`."""
    for module in model.modules():
        for name, function, decorator, size in _cached_methods(type(module)):
            setattr(module, name, types.MethodType(decorator(maxsize=size)(function), module))
    return model
