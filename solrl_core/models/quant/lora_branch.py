"""A LoRA branch in high precision beside a (quantized) base layer: y = base(x) + s·B·(A·x).

For the explore copy with ``quant.lora_branch``: W0 alone is quantized (the same every iteration), θ_old's low-rank update is never merged into
it and so never rounded to 4 bits (as SVDQuant keeps a 16-bit low-rank branch beside its 4-bit weights). The branch
reads the layer's unquantized input and computes in the factors' dtype: fp32, as `LoraPolicy` keeps θ_old whatever
the base's dtype (`rl.policy.MASTER_DTYPE`); the base layer quantizes its own input as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from solrl_core.models.quant.linear import _set_submodule


class LoraBranch(nn.Module):
    """``base`` (any Linear-like layer) plus the low-rank term ``scaling · B · A · x`` in the factors' dtype."""

    def __init__(self, base: nn.Module, lora_A: torch.Tensor, lora_B: torch.Tensor, scaling: float):
        super().__init__()
        if lora_A.shape[1] != base.in_features or lora_B.shape[0] != base.out_features:
            raise ValueError(f"LoRA factors {tuple(lora_B.shape)}·{tuple(lora_A.shape)} do not fit a layer "
                             f"{base.out_features}×{base.in_features}")
        self.base_layer = base
        self.in_features, self.out_features = base.in_features, base.out_features
        self.register_buffer("lora_A", lora_A.detach().clone(), persistent=False)
        self.register_buffer("lora_B", lora_B.detach().clone(), persistent=False)
        self.scaling = scaling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base_layer(x)
        low_rank = F.linear(F.linear(x.to(self.lora_A.dtype), self.lora_A), self.lora_B)
        return y + (self.scaling * low_rank).to(y.dtype)


def attach_lora_branches(model: nn.Module, factors: dict[str, tuple[torch.Tensor, torch.Tensor, float]]) -> int:
    """Wrap each module named in ``factors`` (name → (A, B, scaling), e.g. ``LoraPolicy.lora_factors``) of ``model``
    in place in a `LoraBranch`; returns how many. A module that already is a branch gets new factors."""
    for name, (lora_A, lora_B, scaling) in factors.items():
        module = model.get_submodule(name)
        base = module.base_layer if isinstance(module, LoraBranch) else module
        _set_submodule(model, name, LoraBranch(base, lora_A.to(_device(base)), lora_B.to(_device(base)), scaling))
    return len(factors)


def _device(module: nn.Module) -> torch.device:
    for t in (*module.parameters(), *module.buffers()):
        return t.device
    return torch.device("cpu")
