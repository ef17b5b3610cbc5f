"""LoRA sync of the explore copy: after an update, re-quantize only the layers whose merged weights changed.

Each iteration the explore copy is W0 + the merged ``old`` adapter, quantized. The adapter only touches its
target layers (attention projections), so instead of rebuilding and re-quantizing the whole model, compare the
new merged state dict with the previous one and refresh what differs: a quantized layer (anything with a
``load_source(weight, bias)`` method: ``NVFP4EmulatedLinear``, ``FP8EmulatedLinear``, ``ScaledMMFP8Linear``,
``BF16Linear``, ``TELinear``) is re-quantized from its new full-precision weight and bias; any other tensor (a
high-precision Linear, a norm, an embedding) is copied in as ``load_state_dict`` would. The result equals a
fresh quantization of the merged weights exactly (tested).
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import nn


def changed_keys(
    merged_state_dict: Mapping[str, torch.Tensor], previous_merged_state_dict: Mapping[str, torch.Tensor] | None
) -> list[str]:
    """Keys of ``merged_state_dict`` whose tensor differs (value, shape or dtype) from the previous one, or is new.

    With no previous state dict every key counts as changed.
    """
    if previous_merged_state_dict is None:
        return list(merged_state_dict)
    out = []
    for key, value in merged_state_dict.items():
        old = previous_merged_state_dict.get(key)
        if old is None or old.shape != value.shape or old.dtype != value.dtype or not torch.equal(
            old.to(value.device), value
        ):
            out.append(key)
    return out


@torch.no_grad()
def requantize_changed(
    explore_model: nn.Module,
    merged_state_dict: Mapping[str, torch.Tensor],
    previous_merged_state_dict: Mapping[str, torch.Tensor] | None,
) -> list[str]:
    """Bring ``explore_model`` (an explore copy built from ``previous_merged_state_dict``) to the new merged
    weights, re-quantizing only the layers whose weights or bias changed. Returns the changed state-dict keys
    (in ``merged_state_dict`` order). ``previous_merged_state_dict=None`` refreshes everything.

    Keys are those of the full-precision model (``"blocks.0.attn.to_q.weight"``); a quantized layer takes its
    new ``weight`` and ``bias`` together. Raises ValueError for a key with no counterpart in the explore copy.
    """
    changed = changed_keys(merged_state_dict, previous_merged_state_dict)
    layers: dict[str, nn.Module] = {}
    for key in changed:
        module_name, _, attr = key.rpartition(".")
        try:
            module = explore_model.get_submodule(module_name) if module_name else explore_model
        except AttributeError as exc:
            raise ValueError(f"merged weight {key!r} has no module in the explore copy") from exc
        if hasattr(module, "load_source"):
            if attr not in ("weight", "bias"):
                raise ValueError(f"merged weight {key!r}: a quantized layer only takes 'weight' and 'bias'")
            layers[module_name] = module
            continue
        target = getattr(module, attr, None)
        if not isinstance(target, torch.Tensor):
            raise ValueError(f"merged weight {key!r} has no tensor in the explore copy")
        value = merged_state_dict[key]
        if target.shape != value.shape:
            raise ValueError(f"merged weight {key!r} has shape {tuple(value.shape)}, explore copy {tuple(target.shape)}")
        target.copy_(value)
    for module_name, module in layers.items():
        prefix = f"{module_name}." if module_name else ""
        weight = merged_state_dict.get(prefix + "weight")
        if weight is None:
            raise ValueError(f"merged state dict lacks {prefix + 'weight'!r} for quantized layer {module_name!r}")
        module.load_source(weight, merged_state_dict.get(prefix + "bias"))
    return changed
