"""The loaded backbones of this process, one per model config, with their pristine base weights W0; and how many
times this process loaded one (a device worker of a run loads its model once and keeps it)."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator

from solrl_core.models.backbones.base import Backbone
from solrl_core.config.schema import RunConfig

_load_seconds: list[float] = []  # one entry per model this process loaded
_refusal: list[str] = []  # why this process must not load a model now (innermost last)


@functools.lru_cache(maxsize=2)
def _load_backbone(model_json: str) -> Backbone:
    from solrl_core.models.backbones import registry
    from solrl_core.config.schema import ModelConfig

    if _refusal:
        raise RuntimeError(f"{_refusal[-1]} loaded a model: its device workers load it, once each (a bug in solrl)")
    start = time.perf_counter()
    backbone = registry.load_backbone(ModelConfig.model_validate_json(model_json))
    _load_seconds.append(round(time.perf_counter() - start, 3))
    return backbone


def load_backbone(cfg: RunConfig) -> Backbone:
    """The backbone with its pristine base weights W0 (cached per process; never modify `.transformer`)."""
    return _load_backbone(cfg.model.model_dump_json())


@functools.lru_cache(maxsize=2)
def _load_sibling(model_json: str, path: str) -> Backbone:
    backbone = _load_backbone(model_json)
    if _refusal:
        raise RuntimeError(f"{_refusal[-1]} loaded a model: its device workers load it, once each (a bug in solrl)")
    start = time.perf_counter()
    view = backbone.sibling(path)
    _load_seconds.append(round(time.perf_counter() - start, 3))
    return view


def load_sibling(cfg: RunConfig, path: str) -> Backbone:
    """The trained model's backbone viewed with the sibling at `path` (`Backbone.sibling`, explore.sibling), cached
    per process beside it; its weights are the sibling's pristine ones (never modify `.transformer`)."""
    return _load_sibling(cfg.model.model_dump_json(), path)


def held_models() -> int:
    """How many models (backbones and sibling views) this process holds in its cache now."""
    return _load_backbone.cache_info().currsize + _load_sibling.cache_info().currsize


def drop_models() -> None:
    """Forget this process's cached models and give their device memory back: before other processes load the model
    on the same devices (a torchrun-started update whose rank 0 shares this process's GPU). The next model work in
    this process loads again (counted by `model_loads`)."""
    import gc

    import torch

    held = held_models()
    _load_sibling.cache_clear()
    _load_backbone.cache_clear()
    if held:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def model_loads() -> int:
    """How many models this process has loaded so far (recorded with each piece of work it runs)."""
    return len(_load_seconds)


@contextlib.contextmanager
def refuse_model_loads(who: str) -> Iterator[None]:
    """Inside, loading a model in this process is an error naming `who`: a process that leaves the models to its
    device workers (the flow process of a run split over devices) never holds one."""
    _refusal.append(who)
    try:
        yield
    finally:
        _refusal.pop()
