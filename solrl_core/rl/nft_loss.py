"""The DiffusionNFT loss (docs/method.md, "DiffusionNFT loss") and the rectified-flow forward process.

Reading of the formula, matching the reference code:
- every "mean" without further qualification is over all non-batch elements of one sample;
- v_old and v_ref are treated as constants (detached here, whatever the caller passed);
- the KL-like term is the mean over all elements of (v - v_ref)^2, i.e. the mean over samples of the per-sample
  mean squared velocity gap (equal, since every sample has the same number of elements);
- the loss is computed in float32 whatever the model dtype.
"""

from __future__ import annotations

import torch

W_FLOOR = 1e-5


def _per_sample(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshape a (B,) tensor to (B, 1, ..., 1) so it broadcasts against `like`."""
    t = torch.as_tensor(t, dtype=like.dtype, device=like.device)
    if t.ndim == 0:
        t = t.expand(like.shape[0])
    if t.shape != like.shape[:1]:
        raise ValueError(f"expected a per-sample tensor of shape ({like.shape[0]},), got {tuple(t.shape)}")
    return t.reshape(-1, *([1] * (like.ndim - 1)))


def forward_noise(x0: torch.Tensor, t: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """x_t = (1 - t) x0 + t eps, with t of shape (B,) (or a scalar)."""
    tb = _per_sample(t, x0)
    return (1 - tb) * x0 + tb * eps


def _sample_mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(dim=tuple(range(1, x.ndim)))


def nft_loss(
    v: torch.Tensor,
    v_old: torch.Tensor,
    v_ref: torch.Tensor,
    x_t: torch.Tensor,
    x0: torch.Tensor,
    t: torch.Tensor,
    r: torch.Tensor,
    beta: float = 1.0,
    adv_clip: float = 5.0,
    kl_weight: float = 1e-4,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DiffusionNFT loss for one micro-batch; returns (loss, terms).

    v: velocity under θ (carries the gradient); v_old: under θ_old; v_ref: adapters disabled; x_t: noised latents at
    times t (B,); x0: the clean latents they were made from; r: optimality (B,) in [0, 1].
    terms: loss, policy_loss, kl (mean squared velocity gap to the reference), x0_pos_err / x0_neg_err (batch mean of
    the unfloored weights w+ / w-, i.e. mean |x0± - x0|), as detached 0-dim tensors on the loss's device: reading
    them is a host sync, which a caller does once per optimizer step, not per micro-batch.
    """
    if beta <= 0:
        raise ValueError(f"beta must be positive, got {beta}")
    v = v.float()
    v_old = v_old.detach().float()
    v_ref = v_ref.detach().float()
    x_t, x0 = x_t.float(), x0.float()
    tb = _per_sample(t, x0)
    r = torch.as_tensor(r, dtype=torch.float32, device=v.device).reshape(-1)

    v_pos = beta * v + (1 - beta) * v_old
    v_neg = (1 + beta) * v_old - beta * v
    x0_pos = x_t - tb * v_pos
    x0_neg = x_t - tb * v_neg
    with torch.no_grad():
        err_pos = _sample_mean((x0_pos - x0).abs())
        err_neg = _sample_mean((x0_neg - x0).abs())
        w_pos = err_pos.clamp(min=W_FLOOR)
        w_neg = err_neg.clamp(min=W_FLOOR)
    loss_pos = _sample_mean((x0_pos - x0) ** 2) / w_pos
    loss_neg = _sample_mean((x0_neg - x0) ** 2) / w_neg
    policy_loss = adv_clip * ((r * loss_pos + (1 - r) * loss_neg) / beta).mean()
    kl = ((v - v_ref) ** 2).mean()
    loss = policy_loss + kl_weight * kl
    terms = {
        "loss": loss.detach(),
        "policy_loss": policy_loss.detach(),
        "kl": kl.detach(),
        "x0_pos_err": err_pos.mean(),
        "x0_neg_err": err_neg.mean(),
    }
    return loss, terms
