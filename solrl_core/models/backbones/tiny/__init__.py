"""Tiny random-weight diffusers directories of the real architectures (`solrl make-tiny MODEL DIR`), for tests and
for trying the pipeline on a CPU. Each maker writes a directory that `model.path` can point at; which maker a model
has is its spec's `tiny_maker` (solrl_core/models/backbones/specs/)."""

from __future__ import annotations

import importlib
from pathlib import Path

from solrl_core.models.backbones.registry import backbone_specs
from solrl_core.models.backbones.spec import BackboneSpec
from solrl_core.errors import SolrlError


def tiny_models() -> dict[str, BackboneSpec]:
    """Model name -> spec, for every backbone with a tiny maker."""
    return {s.key: s for s in backbone_specs() if s.tiny_maker}


def tiny_spec(model: str) -> BackboneSpec:
    """The spec of a model `make-tiny` can write; SolrlError listing the known ones."""
    known = tiny_models()
    if model not in known:
        raise SolrlError(f"unknown model '{model}' (known: {', '.join(known)})")
    return known[model]


def make_tiny_model(model: str, out_dir: str | Path) -> Path:
    """Write the tiny diffusers directory of `model` into `out_dir` (created) and return it."""
    module, _, name = tiny_spec(model).tiny_maker.partition(":")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    getattr(importlib.import_module(module), name)(out)
    return out
