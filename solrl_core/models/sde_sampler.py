"""Flow-GRPO's SDE sampler: the ODE schedule of `sampler.sample`, with the SDE step of `models.sde_step.sde_step` on a
window of steps (every step by default) and Euler ODE steps elsewhere, recording the trajectory and the per-step
log-probabilities the GRPO update needs.

The noise of step i of a sample is drawn from (its seed, i) alone, on the CPU, like its initial noise: a sample's
trajectory does not depend on its batch or process, and an explore and a regenerate of the same seed walk the same
noise (at 4 bits and at full precision alike).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from solrl_core.models.backbones.base import Backbone, Conditioning, module_device
from solrl_core.models.sampler import guided_velocity, make_scheduler
from solrl_core.models.step_cache import fresh_trajectories, step_context
from solrl_core.models.step_precision import model_at, models_of
from solrl_core.seeds import derived_generator
from solrl_core.errors import SolrlError
from solrl_core.models.sde_step import schedule_sigma_max, sde_step, sde_window_problem

PURPOSE_SDE_NOISE = 7  # a stream of its own among a seed's draws (the initial noise is the seed's own generator)


def step_noise(seeds: Sequence[int], step: int, shape: Sequence[int]) -> torch.Tensor:
    """The SDE noise of step `step` for each seed, stacked: (len(seeds), *shape), float32 on the CPU."""
    return torch.stack([torch.randn(tuple(shape), generator=derived_generator(int(s), PURPOSE_SDE_NOISE, step),
                                    dtype=torch.float32) for s in seeds])


@dataclass
class SdeResult:
    x0: torch.Tensor  # the clean final latents (B, ...)
    sigmas: list[float]  # the schedule, terminal 0 included
    window: tuple[int, int]  # the SDE steps [start, stop)
    latents: torch.Tensor  # (B, stop - start + 1, ...): x at the window's start and after each of its steps
    log_probs: torch.Tensor  # (B, stop - start): log p of each window step's result under the sampling policy


@torch.no_grad()
def sample_sde(backbone: Backbone, transformer: torch.nn.Module, cond: Conditioning, seeds: Sequence[int],
               steps: int, noise_level: float, window: tuple[int, int] | None = None, *, guidance: float = 1.0,
               uncond: Conditioning | None = None) -> SdeResult:
    """Sample from the seeds' initial noise in `steps` steps: SDE steps (noise level `noise_level`) on `window`
    ([start, stop) step indices; None = every step), Euler ODE steps elsewhere."""
    if steps < 1:
        raise ValueError("steps must be >= 1")
    start, stop = window if window is not None else (0, steps)
    if not 0 <= start < stop <= steps:
        raise ValueError(f"the SDE window [{start}, {stop}) must lie within the {steps} steps")
    scheduler = make_scheduler(backbone.sigmas(steps))
    sigmas = [float(s) for s in scheduler.sigmas]
    problem = sde_window_problem(sigmas, (start, stop))
    if problem:  # before the first step: a window that divides by ~0 samples noise, not images
        raise SolrlError(problem)
    sigma_max = schedule_sigma_max(sigmas)
    device = module_device(transformer)
    x = backbone.initial_noise(list(seeds)).to(device)
    batch = x.shape[0]
    # the model's time input: the schedule's sigmas themselves, the values the update feeds the model when it
    # recomputes these steps' log-probabilities (so that on policy the ratio is exactly 1)
    model_sigmas = torch.tensor(sigmas, dtype=torch.float32).to(device=device, dtype=x.dtype)
    step_sigmas = torch.tensor(sigmas, dtype=torch.float32).to(device)  # the SDE's σ, σ' (float32, as the update's)
    # every window step's noise drawn on the CPU and moved at once (a copy per step would stall the loop)
    noise = torch.stack([step_noise(seeds, i, x.shape[1:]) for i in range(start, stop)], dim=1).to(device)
    latents, log_probs = [], []
    for model in models_of(transformer):  # an explore policy's step cache (models/step_cache.py) starts afresh
        fresh_trajectories(model)
    for i in range(steps):
        model = model_at(transformer, i, steps)  # step-selective precision: models/step_precision.py
        with step_context(model, i, steps, sigmas[i]), backbone.calls_at(model, sigmas[i]):
            v = guided_velocity(backbone, model, x, model_sigmas[i].expand(batch), cond, guidance, uncond,
                                step_sigma=sigmas[i])
        if start <= i < stop:
            if i == start:
                latents.append(x.float())
            step = sde_step(x, v, step_sigmas[i], step_sigmas[i + 1], sigma_max, noise_level,
                            noise=noise[:, i - start])
            x = step.prev_sample.to(x.dtype)
            latents.append(step.prev_sample)
            log_probs.append(step.log_prob)
        else:
            x = (x.float() + (sigmas[i + 1] - sigmas[i]) * v.float()).to(x.dtype)  # the Euler ODE step
    return SdeResult(x0=x, sigmas=sigmas, window=(start, stop), latents=torch.stack(latents, dim=1),
                     log_probs=torch.stack(log_probs, dim=1))
