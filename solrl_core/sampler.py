"""Deterministic ODE sampling on the flow-matching sigma schedule (diffusers' FlowMatchEulerDiscreteScheduler)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from tqdm.auto import tqdm

from solrl_core.backbones.base import Backbone, Conditioning


def uniform_sigmas(steps: int) -> np.ndarray:
    """Uniform sigma schedule 1, 1 - 1/steps, ..., 1/steps (the terminal 0 is appended by the scheduler)."""
    if steps < 1:
        raise ValueError("steps must be >= 1")
    return np.linspace(1.0, 0.0, steps + 1)[:-1].astype(np.float64)


def make_scheduler(steps: int, shift: float = 1.0) -> FlowMatchEulerDiscreteScheduler:
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=shift)
    scheduler.set_timesteps(sigmas=uniform_sigmas(steps).tolist(), device="cpu")
    return scheduler


@dataclass
class SampleResult:
    x0: torch.Tensor  # clean final latents (B, ...)
    sigmas: list[float]  # the schedule's sigmas, terminal 0 included


@torch.no_grad()
def sample_euler(
    backbone: Backbone,
    transformer: torch.nn.Module,
    cond: Conditioning,
    noise: torch.Tensor,
    steps: int,
    progress: bool = False,
    desc: str = "sampling",
) -> SampleResult:
    """Integrate the probability-flow ODE from `noise` (sigma=1) to sigma=0 with `steps` Euler steps."""
    scheduler = make_scheduler(steps)
    x = noise.clone()
    batch = x.shape[0]
    for t in tqdm(scheduler.timesteps, desc=desc, leave=False, disable=not progress):
        sigma = (t / scheduler.config.num_train_timesteps).expand(batch).to(x.dtype)
        v = backbone.velocity(transformer, x, sigma, cond)
        x = scheduler.step(v, t, x, return_dict=False)[0]
    return SampleResult(x0=x, sigmas=[float(s) for s in scheduler.sigmas])
