"""The samples an iteration's update trains on, priced: how many, their latent's shape on a full-size model, and
the bytes the update holds of them on every rank (``stages.update.training_data``) — read by the memory check
(``planner.fits``) and the run-directory estimate (``planner.disk``)."""

from __future__ import annotations

import math

LATENT = 4  # bytes per latent value: float32, in the pools and on the update's device


def full_size_latent(model: str, resolution: int | None = None, frames: int | None = None) -> tuple[int, ...]:
    """One sample's latent of a full-size model at `resolution` and, for a video model, `frames` (None: its own)."""
    from solrl_core.planner.memory import SPECS

    return SPECS[model].latent_at(resolution, frames)


def kept_samples(cfg) -> int:
    """The samples an iteration's update trains on: the kept candidates of every prompt."""
    from solrl_core.rl.selection import kept_per_prompt

    seeds = cfg.explore.seeds_per_prompt
    return cfg.prompts.per_iteration * min(kept_per_prompt(cfg.select, seeds), seeds)


def trained_window_steps(cfg) -> int:
    """The SDE window's length whose latents and log-probabilities each of the update's samples keeps (0: an
    objective that trains on the final latents alone)."""
    from solrl_core.rl.objectives import objective_for

    objective = objective_for(cfg)
    if not objective.trajectory:
        return 0
    window = objective.sde_window(cfg.regenerate.steps if cfg.regenerate.enabled else cfg.explore.steps)
    return window[1] - window[0]


def update_samples_bytes(cfg, latent: tuple[int, ...]) -> int:
    """What the update holds of its samples on every rank (``stages.update.training_data``, float32): each kept
    sample's final latent and, for a trajectory objective, its window's W + 1 latents and W log-probabilities."""
    window = trained_window_steps(cfg)
    per_sample = LATENT * math.prod(latent) * (1 + (window + 1 if window else 0)) + LATENT * window
    return kept_samples(cfg) * per_sample
