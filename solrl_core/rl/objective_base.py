"""What an RL objective is to the pipeline: what the regenerate stage must keep for it, which forwards a training
pair costs, how θ_old follows θ, and the loss of a micro-batch. The registry is `rl.objectives`.

The update stage (`stages/update.py`) owns everything around the loss: the model, the adapters, the optimizer, the
sharding of the pairs over ranks, gradient sync and checkpoints. It hands an objective the iteration's training data
(`TrainingData`) once, asks it for each optimizer step's pairs (`Objective.step`), and for each micro-batch of this
rank's pairs calls the step's `loss` with `forward(adapter, x, t, rows)`, the velocity under an adapter: "default"
(θ, with its gradient), "old" (θ_old) or "reference" (the base W0), on the conditioning of sample rows `rows`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # config validation reads the registry (rl/objectives.py) without importing torch
    import torch

Forward = Callable[[str, "torch.Tensor", "torch.Tensor", "torch.Tensor"], "torch.Tensor"]  # (adapter, x, t, rows) -> v


@dataclass(frozen=True)
class TrainingData:
    """One iteration's training samples on the update's device: what the regenerate stage wrote (final latents, and
    for a trajectory objective the SDE window's latents and log-probabilities) and their rewards."""

    latents: torch.Tensor  # (B, ...) clean final latents
    sigmas: list[float]  # the samples' schedule, terminal 0 included
    rewards: np.ndarray  # (B,)
    prompt_index: np.ndarray  # (B,)
    trajectory: torch.Tensor | None = None  # (B, W + 1, ...): x at the window's start and after each window step
    log_probs: torch.Tensor | None = None  # (B, W): the sampling policy's log p of each window step
    window: tuple[int, int] | None = None  # the SDE steps [start, stop) of the schedule


class ObjectiveStep:
    """One optimizer step's training pairs: `n_pairs` over all ranks, `len()` of them on this rank, and the loss of
    this rank's pairs [start, stop) (a micro-batch) with its terms (detached 0-dim tensors: loss, policy_loss, kl,
    and what else the objective reports)."""

    n_pairs: int

    def __len__(self) -> int:
        raise NotImplementedError

    def loss(self, start: int, stop: int, forward: Forward) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def row_times(self, start: int, stop: int) -> list[float] | None:
        """The σ each pair of [start, stop) is trained at, as host floats, when the step knows them without the
        device (a model of experts is then routed by them, with no read back); None: a plug-in that does not say."""
        return None


class Objective:
    """An RL objective: register it in `rl.objectives.OBJECTIVES`, or name one of your own package as
    `objective.name: package.module:Class` (its settings under `objective.options`)."""

    name: str
    title: str  # as people write it (DiffusionNFT, Flow-GRPO)
    summary: str
    trajectory: bool = False  # regenerate keeps the SDE trajectory and its log-probs (else the final latents only)
    forwards: tuple[str, ...] = ()  # the adapters each training pair runs a forward of ("default" has the gradient)
    paradigm: str = "decoupled"  # "decoupled": any sampler makes its samples; "coupled": it needs the SDE's log-probs

    section: str | None = None  # its settings: `objective.<section>` (a plug-in: None, `objective.options`)

    def __init__(self, settings, train):
        self.settings = settings  # its section of the config
        self.train = train  # the run's train section (timestep_fraction, old_eta_*...)

    def sampling_noise_level(self) -> float:
        """The noise level of the SDE its rollouts are sampled with (0: the ODE sampler)."""
        return 0.0

    def sde_window(self, steps: int, draw: torch.Generator | None = None) -> tuple[int, int] | None:
        """The SDE steps of a `steps`-step rollout ([start, stop)), None when it samples with the ODE. `draw`: the
        iteration's generator for a window drawn per iteration (a fresh one per call, so every stage draws alike;
        None: the first of the choices, what the planner sizes)."""
        return None

    def trained_times(self, steps: int) -> int:
        """Training pairs per sample of a `steps`-step rollout (what the planner prices, with `forwards`)."""
        raise NotImplementedError

    def prepare(self, data: TrainingData) -> dict:
        """What every optimizer step of the iteration reuses (advantages...), computed once."""
        return {}

    def step(self, data: TrainingData, prepared: dict, generators: tuple[torch.Generator, torch.Generator],
             shard: Callable[[int], tuple[int, int]]) -> ObjectiveStep:
        """The pairs of one optimizer step. `generators`: the step's (times, noise) streams, derived from the run
        seed, iteration and step (a resumed run draws the same); `shard(n_pairs)` = this rank's [start, stop)."""
        raise NotImplementedError

    def old_policy_eta(self, step: int) -> float:
        """η of θ_old ← η·θ_old + (1 − η)·θ after optimizer step `step` (θ_old samples the next rollouts)."""
        raise NotImplementedError

    def group_advantages(self, data: TrainingData) -> np.ndarray:
        """The samples' group-relative advantages under its settings' `adv_clip` and `advantage_std` (the registered
        objectives' common form: `rl.advantages.group_advantages`)."""
        from solrl_core.rl.advantages import group_advantages

        return group_advantages(data.rewards, data.prompt_index, clip=self.settings.adv_clip,
                                std=self.settings.advantage_std)

    def summary_metrics(self, prepared: dict) -> dict[str, float]:
        """Iteration figures for the update's summary (e.g. the mean |advantage|)."""
        return {}
