"""The loaded backbones of this process, one per model config, with their pristine base weights W0."""

from __future__ import annotations

import functools

from solrl_core.backbones.base import Backbone
from solrl_core.config import RunConfig


@functools.lru_cache(maxsize=2)
def _load_backbone(model_json: str) -> Backbone:
    from solrl_core.backbones import registry
    from solrl_core.config import ModelConfig

    return registry.load_backbone(ModelConfig.model_validate_json(model_json))


def load_backbone(cfg: RunConfig) -> Backbone:
    """The backbone with its pristine base weights W0 (cached per process; never modify `.transformer`)."""
    return _load_backbone(cfg.model.model_dump_json())
