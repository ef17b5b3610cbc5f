"""Advantage-weighted matching's formulas (AWM; Xue et al. 2025, scxue/advantage_weighted_matching,
`scripts/train_sd3_awm.py` `compute_log_prob_awm` and its training loop): the flow-matching error of a noised final
sample read as a log-likelihood, and the clipped, advantage-weighted loss on it.

For a clean sample x0, noise ε and time t, x_t = (1 − t) x0 + t ε and the flow-matching target is ε − x0:

    e      = mean over a sample's elements of (v − (ε − x0))²          (float64, as the reference)
    log p  = −((e + 1e-10)^p − (1e-10)^p) · t / p                      (its "ghuber" weighting, power p)
    A'     = clip(A, ±adv_clip) / adv_clip · advantage_max
    ratio  = exp(log p_θ − log p_old)
    policy = mean(max(−A' · ratio, −A' · clip(ratio, 1 − ε, 1 + ε)))
    loss   = policy + β · mean((v − v_ref)²) + β_old · mean((v − v_old)²)

(its `loss_type` "exp_first", `kl_weight` and `kl_ema_weight` "Uniform").
"""

from __future__ import annotations

import torch

EPS = 1e-10  # the reference's offset inside the power


def _sample_mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(dim=tuple(range(1, x.ndim)))


def awm_log_prob(v: torch.Tensor, eps: torch.Tensor, x0: torch.Tensor, t: torch.Tensor, power: float) -> torch.Tensor:
    """The per-pair (B,) ghuber-weighted log-likelihood of the velocity v at x_t against the target ε − x0, in
    float64; t is (B,)."""
    err = _sample_mean((v.double() - (eps.double() - x0.double())) ** 2)
    floor = err.new_full((), EPS)  # made on the device: no host-to-device copy per micro-batch
    return -((err + EPS) ** power - floor ** power) * t.double().reshape(-1) / power


def awm_loss(log_prob: torch.Tensor, log_prob_old: torch.Tensor, advantages: torch.Tensor, v: torch.Tensor,
             v_old: torch.Tensor, v_ref: torch.Tensor | None, *, adv_clip: float, advantage_max: float,
             clip_range: float, kl_weight: float, old_kl_weight: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """AWM's loss for one micro-batch of (sample, time) pairs; returns (loss, terms) with the terms as detached 0-dim
    tensors. `v_ref` None: no KL term to the reference (kl_weight must be 0)."""
    adv = advantages.double().clamp(-adv_clip, adv_clip) / adv_clip * advantage_max
    ratio = torch.exp(log_prob - log_prob_old.detach())
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_range, 1.0 + clip_range)
    policy_loss = torch.maximum(unclipped, clipped).mean().float()
    v = v.float()
    if v_ref is None:
        if kl_weight:
            raise ValueError("a KL weight needs the reference policy's velocities (v_ref)")
        kl = torch.zeros((), device=v.device)
    else:
        kl = ((v - v_ref.detach().float()) ** 2).mean()
    old_kl = ((v - v_old.detach().float()) ** 2).mean()
    loss = policy_loss + kl_weight * kl + old_kl_weight * old_kl
    terms = {
        "loss": loss.detach(),
        "policy_loss": policy_loss.detach(),
        "kl": kl.detach(),
        "old_kl": old_kl.detach(),
        "ratio_mean": ratio.detach().mean().float(),
        "clip_fraction": ((ratio.detach() - 1.0).abs() > clip_range).float().mean(),
    }
    return loss, terms
