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


def merged_transformer(backbone: Backbone, weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A `weight_sharing_transformer` whose parameters named in `weights` (parameter name → tensor: the LoRA policy's
    W0 + ΔW of its targeted layers, `lora_weights`; every parameter of a fully fine-tuned θ_old or EMA,
    `stages.checkpoints.full_weights`) hold those tensors instead of W0's: it costs the memory of the replaced
    parameters alone, and W0 is never written. For the explore copy (quantized next: its quantized layers are new
    modules, so each replaced weight is freed once its layer is replaced), the regenerate's θ_old under full
    fine-tuning, and the evaluation's policy."""
    model = weight_sharing_transformer(backbone)
    for name, tensor in weights.items():
        module_name, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(module_name), leaf, torch.nn.Parameter(tensor, requires_grad=False))
    return model


def lora_weights(merged: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`LoraPolicy.merged_weights` (module name → merged weight) as parameter names for `merged_transformer`."""
    return {f"{module}.weight": weight for module, weight in merged.items()}
