"""LoRA sync of the explore copy: after an update, re-quantize only the layers whose merged weights changed.

Each iteration the explore copy is W0 + the merged ``old`` adapter, quantized. The adapter only touches its
target layers (attention projections), so instead of rebuilding and re-quantizing the whole model, compare the
new merged state dict with the previous one and refresh what differs: a quantized layer (anything with a
``load_source(weight, bias)`` method: ``NVFP4EmulatedLinear``, ``FP8EmulatedLinear``, ``ScaledMMFP8Linear``,
``BF16Linear``, ``TELinear``) is re-quantized from its new full-precision weight and bias; any other tensor (a
high-precision Linear, a norm, an embedding) is replaced by a copy of the new value, in the old tensor's dtype and
device. The result equals a fresh quantization of the merged weights exactly (tested).

Nothing shared is written in place: a layer's ``load_source`` writes only the layer's own tensors, and any other
tensor is swapped for a new one. So an explore copy whose unquantized tensors are shared with the base model (W0) is
synced without touching the base model (two names tied to one tensor get two equal tensors).
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

from solrl_core.models.quant.linear import read_back, read_weight_errors


def changed_keys(
    merged_state_dict: Mapping[str, torch.Tensor], previous_merged_state_dict: Mapping[str, torch.Tensor] | None
) -> list[str]:
    """Keys of ``merged_state_dict`` whose tensor differs (value, shape or dtype) from the previous one, or is new.

    With no previous state dict every key counts as changed. Values compare as ``torch.equal`` does (NaN differs
    from NaN, -0.0 equals 0.0); the comparisons are read back from the device at once, not one sync per key.
    """
    if previous_merged_state_dict is None:
        return list(merged_state_dict)
    differs: dict[str, bool | torch.Tensor] = {}
    for key, value in merged_state_dict.items():
        old = previous_merged_state_dict.get(key)
        if old is None or old.shape != value.shape or old.dtype != value.dtype:
            differs[key] = True
        else:
            differs[key] = torch.ne(old.to(value.device), value).any()
    compared = [k for k, d in differs.items() if isinstance(d, torch.Tensor)]
    differs.update(zip(compared, read_back([differs[k] for k in compared])))
    return [key for key, d in differs.items() if d]


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
    new ``weight`` and ``bias`` together. Raises ValueError for a key with no counterpart in the explore copy, and
    (after the sync, with one host sync for all layers) when a re-quantized layer's new weight holds NaN or ±inf.
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
        _replace_tensor(module, attr, target, value)
    for module_name, module in layers.items():
        prefix = f"{module_name}." if module_name else ""
        weight = merged_state_dict.get(prefix + "weight")
        if weight is None:
            raise ValueError(f"merged state dict lacks {prefix + 'weight'!r} for quantized layer {module_name!r}")
        module.load_source(weight, merged_state_dict.get(prefix + "bias"))
    read_weight_errors(list(layers.items()))
    return changed


def _replace_tensor(module: nn.Module, attr: str, target: torch.Tensor, value: torch.Tensor) -> None:
    """Set ``module.<attr>`` (now ``target``) to a copy of ``value`` in ``target``'s dtype and device: a new tensor
    (a new Parameter for a parameter), so whoever else holds ``target`` keeps its values."""
    new = value.detach().to(device=target.device, dtype=target.dtype, copy=True)
    if isinstance(target, nn.Parameter):
        new = nn.Parameter(new, requires_grad=target.requires_grad)
    setattr(module, attr, new)
