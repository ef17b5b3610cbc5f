"""θ_old for sampling at full precision: a LoRA branch on the shared base weights W0, no merged copy.

The regenerate stage and the audit sample with θ_old. Rather than a second full transformer holding W0 + ΔW (what
`LoraPolicy.merged_state_dict` gives), peft's LoRA layers wrap a module tree whose weights ARE the cached backbone's
(`stages.context.attach_policy`), with the ``old`` adapter active: each targeted Linear computes W0·x + B·A·x·(α/r).
The samples equal the merged copy's up to float rounding (tests/unit/stages/test_old_policy_branch.py); the memory is W0 once
plus the adapters.
"""

from __future__ import annotations

import torch

from solrl_core.models.backbones.base import Backbone
from solrl_core.stages.checkpoints import attach_policy, full_weights, is_full, load_adapters, previous_checkpoint
from solrl_core.stages.transformer_copies import merged_transformer
from solrl_core.stages.context import StageContext


def old_policy_transformer(ctx: StageContext, backbone: Backbone) -> torch.nn.Module:
    """W0 with θ_old (the previous checkpoint's ``old`` adapter) as an active, unmerged LoRA branch; under full
    fine-tuning a transformer holding θ_old's weights (W0's memory again, at the base's dtype)."""
    from solrl_core.rl.policy import OLD

    if is_full(ctx.cfg):
        return merged_transformer(backbone, full_weights(backbone, previous_checkpoint(ctx), OLD))
    policy = attach_policy(ctx.cfg, backbone)
    load_adapters(policy, previous_checkpoint(ctx))
    return policy.use(OLD)
