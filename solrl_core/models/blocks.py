"""A diffusers transformer's blocks: the children of its top-level ModuleLists, the units diffusers checkpoints
activations over, the planner measures, and FSDP2 shards (solrl_core/rl/full_policy.py)."""

from __future__ import annotations

from torch import nn


def transformer_blocks(module: nn.Module) -> dict[str, nn.Module]:
    """Qualified name ("transformer_blocks.3") -> block, in order; of a transformer made of experts
    (solrl_core/models/experts.py), every expert's blocks under its name ("transformer_2.blocks.3")."""
    experts = getattr(module, "expert_names", None)
    if experts:
        return {f"{expert}.{name}": block for expert in experts
                for name, block in transformer_blocks(getattr(module, expert)).items()}
    return {f"{name}.{i}": block for name, child in module.named_children() if isinstance(child, nn.ModuleList)
            for i, block in enumerate(child)}
