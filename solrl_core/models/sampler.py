"""Deterministic ODE sampling on a backbone's flow-matching sigma schedule, with optional guidance.

Two solvers over the same sigmas (`backbone.sigmas(steps)`, already shifted by the backbone, plus the terminal 0):

* ``euler``: the first-order Euler ODE step of diffusers' FlowMatchEulerDiscreteScheduler (shift 1, custom sigmas).
* ``dpmpp_2m``: DPM-Solver++(2M), the second-order multistep solver on the data (x0) prediction
  ``x0 = x_t - sigma * v``, as used by the reference FLUX.1 / SD3.5 RL runs. diffusers' DPMSolverMultistepScheduler
  computes this update but cannot take a given (shifted) flow schedule, so the step is written here; tests check it
  against that scheduler run on the same sigmas.

Both evaluate the model at the schedule's timesteps / 1000, as diffusers' pipelines do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from tqdm.auto import tqdm

from solrl_core.models.backbones.base import Backbone, Conditioning, module_device
from solrl_core.models.step_cache import fresh_trajectories, step_context
from solrl_core.models.step_precision import model_at, models_of

SAMPLERS = ("euler", "dpmpp_2m")


@dataclass
class SampleResult:
    x0: torch.Tensor  # clean final latents (B, ...)
    sigmas: list[float]  # the schedule's sigmas, terminal 0 included
    sampler: str = "euler"


def make_scheduler(sigmas: list[float]) -> FlowMatchEulerDiscreteScheduler:
    """diffusers' flow-matching Euler scheduler on the given sigmas (terminal 0 excluded; not shifted again)."""
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0)
    scheduler.set_timesteps(sigmas=[float(s) for s in sigmas], device="cpu")
    return scheduler


def schedule_sigmas(backbone: Backbone, steps: int) -> list[float]:
    """The sigmas a `steps`-step sample runs on (as stored with a pool), terminal 0 included."""
    if steps < 1:
        raise ValueError("steps must be >= 1")
    return [float(s) for s in make_scheduler(backbone.sigmas(steps)).sigmas]


def resolve_sampler(configured: str | None, backbone: Backbone) -> str:
    """`model.sampler`, or the backbone's default when it is null."""
    name = configured or backbone.defaults.sampler
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler '{name}' (known: {', '.join(SAMPLERS)})")
    return name


def guided_velocity(
    backbone: Backbone,
    transformer: torch.nn.Module,
    x: torch.Tensor,
    sigma: torch.Tensor,
    cond: Conditioning,
    guidance: float = 1.0,
    uncond: Conditioning | None = None,
    step_sigma: float | None = None,
) -> torch.Tensor:
    """The velocity under guidance (`step_sigma`: the step's sigma as a host float, for a backbone whose scale
    changes over the steps; None reads it from `sigma`, a device read the sampling loops avoid): the model's own
    input for distilled-guidance backbones, classifier-free guidance otherwise (`backbone.combine_guidance`: v_u + g (v_c - v_u) unless the backbone's pipeline rescales it; `uncond` =
    the empty prompt's conditioning, batch 1 or B, an editing model's with each row's source; one forward on the
    concatenated batch), the plain conditional velocity when g = 1."""
    if backbone.defaults.distilled_guidance:
        return backbone.velocity(transformer, x, sigma, cond, guidance=guidance)
    if guidance == 1.0:
        return backbone.velocity(transformer, x, sigma, cond)
    if uncond is None:
        raise ValueError("classifier-free guidance needs `uncond` (the empty prompt's conditioning)")
    if step_sigma is None:
        step_sigma = float(sigma.reshape(-1)[0])
    guidance = backbone.step_guidance(step_sigma, guidance)  # a backbone of experts: each expert's own
    batch = x.shape[0]
    both = {k: torch.cat([uncond[k].expand(batch, *uncond[k].shape[1:]), cond[k]]) for k in cond}
    v = backbone.velocity(transformer, torch.cat([x, x]), torch.cat([sigma, sigma]), both)
    v_u, v_c = v.chunk(2)
    return backbone.combine_guidance(v_u, v_c, guidance)


def dpmpp_2m_step(
    x: torch.Tensor, x0: torch.Tensor, x0_prev: torch.Tensor | None, s_prev: float | None, s: float, t: float
) -> torch.Tensor:
    """One DPM-Solver++(2M) step (midpoint form) from sigma `s` to `t` in flow matching (alpha = 1 - sigma).

    With lambda = log(alpha / sigma), h = lambda_t - lambda_s:
      x_t = (t / s) x + (1 - e^-h) alpha_t (D0 + D1 / 2),  D0 = x0,  D1 = (x0 - x0_prev) h / h_prev,
    and (1 - e^-h) alpha_t = alpha_t - alpha_s t / s (finite at s = 1). First order (D1 = 0) when there is no
    previous x0 or it came from sigma 1 (lambda = -inf), and at the final step to sigma 0 (which returns x0).
    """
    if t <= 0.0:
        return x0
    a_s, a_t = 1.0 - s, 1.0 - t
    coef = a_t - a_s * t / s
    d = x0
    if x0_prev is not None and s_prev is not None and s_prev < 1.0:
        lam = lambda sig: math.log((1.0 - sig) / sig)  # noqa: E731
        h, h_prev = lam(t) - lam(s), lam(s) - lam(s_prev)
        d = x0 + (0.5 * h / h_prev) * (x0 - x0_prev)
    return (t / s) * x + coef * d


@torch.no_grad()
def sample(
    backbone: Backbone,
    transformer: torch.nn.Module,
    cond: Conditioning,
    noise: torch.Tensor,
    steps: int,
    *,
    sampler: str = "euler",
    guidance: float = 1.0,
    uncond: Conditioning | None = None,
    progress: bool = False,
    desc: str = "sampling",
) -> SampleResult:
    """Integrate the probability-flow ODE from `noise` (sigma = 1) to sigma = 0 in `steps` steps of `sampler`, on the
    transformer's device (x0 comes back there)."""
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler '{sampler}' (known: {', '.join(SAMPLERS)})")
    if steps < 1:
        raise ValueError("steps must be >= 1")
    scheduler = make_scheduler(backbone.sigmas(steps))
    sigmas = [float(s) for s in scheduler.sigmas]
    x = noise.to(module_device(transformer), copy=True)  # noise is drawn on the CPU; the model may be elsewhere
    batch = x.shape[0]
    # the model's timestep inputs, moved once (a copy per step would be a host-to-device transfer in the loop)
    model_sigmas = (scheduler.timesteps / scheduler.config.num_train_timesteps).to(device=x.device, dtype=x.dtype)
    x0_prev = None
    for model in models_of(transformer):  # an explore policy's step cache (models/step_cache.py) starts afresh
        fresh_trajectories(model)
    for i, t in enumerate(tqdm(scheduler.timesteps, desc=desc, leave=False, disable=not progress)):
        sigma = model_sigmas[i].expand(batch)
        model = model_at(transformer, i, steps)  # step-selective precision: models/step_precision.py
        with step_context(model, i, steps, sigmas[i]), backbone.calls_at(model, sigmas[i]):
            v = guided_velocity(backbone, model, x, sigma, cond, guidance, uncond, step_sigma=sigmas[i])
        if sampler == "euler":
            x = scheduler.step(v, t, x, return_dict=False)[0]
        else:
            x0 = x - sigmas[i] * v
            x = dpmpp_2m_step(x, x0, x0_prev, sigmas[i - 1] if i else None, sigmas[i], sigmas[i + 1])
            x0_prev = x0
    return SampleResult(x0=x, sigmas=sigmas, sampler=sampler)

