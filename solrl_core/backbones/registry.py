"""Backbone kinds (`model.kind`) -> adapter classes, imported lazily so that an unused backbone costs nothing."""

from __future__ import annotations

import importlib

from solrl_core.backbones.base import Backbone
from solrl_core.errors import ConfigError

ADAPTERS: dict[str, str] = {
    "embedded": "solrl_core.backbones.embedded:EmbeddedBackbone",
    "flux1": "solrl_core.backbones.flux:FluxBackbone",
    "sd35": "solrl_core.backbones.sd3:SD3Backbone",
    "sana": "solrl_core.backbones.sana:SanaBackbone",
}


def adapter_class(kind: str) -> type[Backbone]:
    if kind not in ADAPTERS:
        raise ConfigError(f"model.kind '{kind}' is not a backbone (known: {', '.join(ADAPTERS)})")
    module, _, name = ADAPTERS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def load_backbone(model) -> Backbone:
    """The adapter for a `model:` config section (solrl_core.config.ModelConfig)."""
    return adapter_class(model.kind).load(model)
