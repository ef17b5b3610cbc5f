"""Flow-GRPO's SDE step (Liu et al. 2025; yifan123/flow_grpo), with its log-probability: what the SDE sampler
(solrl_core/models/sde_sampler.py) draws with and the objective (solrl_core/rl/objective_grpo.py) scores.

The SDE step, `flow_grpo/diffusers_patch/sd3_sde_with_logprob.py` `sde_step_with_logprob` (sde_type "sde"): from x at
sigma σ to σ' (dt = σ' - σ < 0), with velocity v and noise level a,

    s      = a · sqrt(σ / (1 - σ̃)),  σ̃ = min(σ, the schedule's second sigma)
    mean   = x · (1 + s² dt / (2σ)) + v · (1 + s² (1 - σ) / (2σ)) · dt
    x'     = mean + s · sqrt(-dt) · ε
    log p  = mean over a sample's elements of the Gaussian log-density of x' under N(mean, (s · sqrt(-dt))²)

computed in float32 whatever the model's dtype (the reference casts too: bf16 overflows). At a = 0 it is the Euler
ODE step and has no density (the caller keeps log p only on the SDE steps).

The stand-in σ̃ is where the SDE's scale, infinite at σ = 1, is made finite. The reference substitutes the second
sigma where σ == 1 exactly; here every σ above the second sigma takes it, which is the schedule's first step
whatever its value: the same as the reference on schedules that start at 1 (SD3, FLUX.1, the embedded model), and
finite on those that start just below it (diffusers' UniPC flow schedule of Wan starts at 0.999999, where the
reference's test never fires and the first step's scale would be ~700 times a). `sde_window_problem` refuses a
window whose steps would still divide by about 0 (a schedule whose second sigma is itself near 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass(frozen=True)
class SdeStep:
    prev_sample: torch.Tensor  # x' (float32)
    log_prob: torch.Tensor  # (B,) mean log-density of x' per sample (NaN where the step has no noise)
    mean: torch.Tensor  # the step's mean (float32), the KL term's input
    std: torch.Tensor  # (B,): s, the noise level's scale at σ (the KL term divides by 2 s²)


# The least 1 - σ̃ an SDE step may divide by: below it the step's scale passes a·31.6 and its noise swamps the
# sample. The references' schedules keep far above it (10 steps of SD3 or Wan: 0.036; 28 steps of Wan at shift 5:
# 0.007).
SDE_MIN_GAP = 1e-3


def schedule_sigma_max(sigmas: list[float]) -> float:
    """The σ̃ that stands in for every σ above it in 1 - σ̃: the schedule's second sigma (the reference's choice at
    σ = 1; a one-step schedule, [σ0, 0], has none, so half of the first)."""
    return sigmas[1] if len(sigmas) > 2 else sigmas[0] / 2


def sde_std(sigma: float, sigma_max: float, noise_level: float) -> float:
    """s = a · sqrt(σ / (1 - σ̃)), σ̃ = min(σ, `sigma_max`): the schedule's second sigma stands in on its first step,
    at σ = 1 (no finite value) and just below it alike."""
    return noise_level * math.sqrt(sigma / (1.0 - min(sigma, sigma_max)))


def sde_window_problem(sigmas: list[float], window: tuple[int, int]) -> str | None:
    """One line saying which step of the SDE window [start, stop) of schedule `sigmas` (terminal 0 included) would
    divide by about 0 (1 - σ̃ below SDE_MIN_GAP), and what to change; None when every step is finite."""
    sigma_max = schedule_sigma_max(sigmas)
    for i in range(*window):
        gap = 1.0 - min(sigmas[i], sigma_max)
        if gap < SDE_MIN_GAP:
            return (f"the SDE window [{window[0]}, {window[1]}) of this {len(sigmas) - 1}-step schedule has step {i} at "
                    f"σ = {sigmas[i]:.6f}, where the SDE's scale a·sqrt(σ / (1 − σ)) divides by {gap:.1e} and its "
                    "noise would swamp the sample; start the window later (objective.flow_grpo.window_start) or "
                    "sample fewer steps")
    return None


def _column(value, like: torch.Tensor) -> torch.Tensor:
    """A float or a (B,) tensor as float32 of shape (B, 1, ..., 1) on `like`'s device."""
    t = torch.as_tensor(value, dtype=torch.float32, device=like.device)
    if t.ndim == 0:
        t = t.expand(like.shape[0])
    return t.reshape(-1, *([1] * (like.ndim - 1)))


def per_sample_mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(dim=tuple(range(1, x.ndim)))


def sde_step(x: torch.Tensor, v: torch.Tensor, sigma, sigma_next, sigma_max: float, noise_level: float,
             noise: torch.Tensor | None = None, prev_sample: torch.Tensor | None = None) -> SdeStep:
    """One step of Flow-GRPO's SDE from σ to σ' with its log-probability; σ and σ' are floats or per-sample (B,)
    tensors. `noise` draws x' (the sampler's step); `prev_sample` is a stored x' whose log-probability under this
    (x, v) is wanted (the update's step). One of them."""
    if (noise is None) == (prev_sample is None):
        raise ValueError("sde_step takes the noise to draw x' with, or a stored x' (prev_sample), not both")
    x, v = x.float(), v.float()
    sig, sig_next = _column(sigma, x), _column(sigma_next, x)
    dt = sig_next - sig
    s = noise_level * torch.sqrt(sig / (1.0 - sig.clamp(max=sigma_max)))
    mean = x * (1 + s * s * dt / (2 * sig)) + v * (1 + s * s * (1 - sig) / (2 * sig)) * dt
    scale = s * torch.sqrt(-dt)
    prev_sample = mean + scale * noise.float() if prev_sample is None else prev_sample.float()
    density = -((prev_sample.detach() - mean) ** 2) / (2 * scale * scale) - torch.log(scale) - LOG_SQRT_2PI
    log_prob = torch.where(scale.reshape(-1) > 0, per_sample_mean(density), float("nan"))  # ODE step: no density
    return SdeStep(prev_sample, log_prob, mean, s.reshape(-1))
