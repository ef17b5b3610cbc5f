"""Copies of the base transformer: private ones (to load, merge or quantize into) and weight-sharing ones."""

from __future__ import annotations

import copy

import torch

from solrl_core.models.backbones.base import Backbone
from solrl_core.models.module_caches import own_method_caches
from solrl_core.stages.context import StageContext
from solrl_core.run.storage import load_tensors


def fresh_transformer(backbone: Backbone) -> torch.nn.Module:
    """A private copy of the base transformer, safe to load other weights into, merge into or quantize; its method
    caches are its own (`own_method_caches`: freed with the copy)."""
    return own_method_caches(copy.deepcopy(backbone.transformer).eval())


def weight_sharing_transformer(backbone: Backbone) -> torch.nn.Module:
    """A copy of the base transformer's modules whose parameters and buffers ARE W0's (no weight memory).

    For the LoRA policy: peft wraps the copy's layers (the cached module tree is untouched) and never writes to base
    weights; merged weights are computed out of place (`LoraPolicy.merged_weights`). Replacing modules (quantization)
    or parameters (`merged_transformer`) in the copy is safe; anything that writes weights in place
    (load_state_dict, `.to(dtype)`) must use `fresh_transformer` instead. Its method caches are its own, as
    `fresh_transformer`'s."""
    base = backbone.transformer
    shared = {id(t): t for t in (*base.parameters(), *base.buffers())}
    return own_method_caches(copy.deepcopy(base, memo=shared).eval())


def merged_transformer(backbone: Backbone, merged: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A `weight_sharing_transformer` whose layers named in `merged` (module name → weight, e.g.
    `LoraPolicy.merged_weights`: W0 + ΔW) hold those weights instead of W0's: it costs the memory of the merged
    layers alone, and W0 is never written. For the explore copy (quantized next: its quantized layers are new
    modules, so each merged weight is freed once its layer is replaced) and the evaluation's policy."""
    model = weight_sharing_transformer(backbone)
    for name, weight in merged.items():
        model.get_submodule(name).weight = torch.nn.Parameter(weight, requires_grad=False)
    return model
