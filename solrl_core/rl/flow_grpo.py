"""Flow-GRPO's clipped policy loss with a KL term to the reference policy (Liu et al. 2025; yifan123/flow_grpo). Its
SDE step and log-probability: solrl_core/models/sde_step.py.

The loss, `scripts/train_sd3.py`: A clipped to ±adv_clip, ratio = exp(log p_θ - log p_old),
policy = mean(max(-A · ratio, -A · clip(ratio, 1 - ε, 1 + ε))), kl = mean over samples of
mean_elements((mean_θ - mean_ref)²) / (2 s²), loss = policy + β · kl.
"""

from __future__ import annotations

import torch

from solrl_core.models.sde_step import per_sample_mean


def grpo_loss(log_prob: torch.Tensor, log_prob_old: torch.Tensor, advantages: torch.Tensor, mean: torch.Tensor,
              mean_ref: torch.Tensor | None, std: torch.Tensor, clip_range: float, adv_clip: float,
              kl_weight: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Flow-GRPO's loss for one micro-batch of (sample, SDE step) pairs; returns (loss, terms) with the terms as
    detached 0-dim tensors (read once per optimizer step). `mean_ref` None: no KL term (kl_weight must be 0)."""
    adv = advantages.float().clamp(-adv_clip, adv_clip)
    ratio = torch.exp(log_prob.float() - log_prob_old.float().detach())
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_range, 1.0 + clip_range)
    policy_loss = torch.maximum(unclipped, clipped).mean()
    if mean_ref is None:
        if kl_weight:
            raise ValueError("a KL weight needs the reference policy's step means (mean_ref)")
        kl = torch.zeros((), device=policy_loss.device)
    else:
        kl = (per_sample_mean((mean.float() - mean_ref.float().detach()) ** 2) / (2 * std.float() ** 2)).mean()
    loss = policy_loss + kl_weight * kl
    terms = {
        "loss": loss.detach(),
        "policy_loss": policy_loss.detach(),
        "kl": kl.detach(),
        "ratio_mean": ratio.detach().mean(),
        "clip_fraction": ((ratio.detach() - 1.0).abs() > clip_range).float().mean(),
    }
    return loss, terms
