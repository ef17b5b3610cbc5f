"""Flow-GRPO as an objective (yifan123/flow_grpo, `scripts/train_sd3.py`; formulas in `rl.flow_grpo`): rollouts are
sampled with the SDE on a window of steps, the regenerate stage keeps that window's latents and the sampling
policy's log-probabilities, and each (sample, window step) pair trains the clipped-ratio policy loss with a KL term
to the reference policy (the coupled paradigm: it needs the sampler's own log-probabilities). θ_old, which samples
the next rollouts, is θ itself after every optimizer step (on-policy)."""

from __future__ import annotations

import numpy as np
import torch

from solrl_core.models.sde_step import schedule_sigma_max, sde_step
from solrl_core.rl.flow_grpo import grpo_loss
from solrl_core.rl.objective_base import Forward, Objective, ObjectiveStep, TrainingData


def sde_window(steps: int, start: int, size: int | None) -> tuple[int, int]:
    """The SDE steps [start, stop) of a `steps`-step rollout: `size` steps from `start` (None: to the end). A
    ValueError when they leave the schedule (the config check refuses such settings first:
    `FlowGRPOSettings.schedule_problem`)."""
    stop = steps if size is None else start + size
    if not 0 <= start < stop <= steps:
        raise ValueError(f"the SDE window [{start}, {stop}) must lie within the {steps} steps")
    return start, stop


class GrpoStep(ObjectiveStep):
    def __init__(self, objective: FlowGRPO, data: TrainingData, prepared: dict, pairs: torch.Tensor, n_pairs: int):
        """`pairs`: this rank's (sample, window step) pairs on the CPU (kept there for `row_times`; moved once)."""
        self.objective, self.data, self.prepared, self.n_pairs = objective, data, prepared, n_pairs
        self.host_pairs, self.pairs = pairs, pairs.to(data.latents.device)

    def __len__(self) -> int:
        return len(self.pairs)

    def row_times(self, start: int, stop: int) -> list[float]:
        """The σ of each pair's window step."""
        return [self.data.sigmas[j + self.data.window[0]] for j in self.host_pairs[start:stop, 1].tolist()]

    def loss(self, start: int, stop: int, forward: Forward):
        s, data, p = self.objective.settings, self.data, self.prepared
        idx, j = self.pairs[start:stop].unbind(1)
        x, x_next = data.trajectory[idx, j], data.trajectory[idx, j + 1]
        sigma, sigma_next = p["sigmas"][j + data.window[0]], p["sigmas"][j + data.window[0] + 1]
        v = forward("default", x, sigma, idx)
        step = sde_step(x, v, sigma, sigma_next, p["sigma_max"], s.noise_level, prev_sample=x_next)
        mean_ref = None
        if s.kl_weight > 0:
            with torch.no_grad():
                v_ref = forward("reference", x, sigma, idx)
                mean_ref = sde_step(x, v_ref, sigma, sigma_next, p["sigma_max"], s.noise_level,
                                    prev_sample=x_next).mean
        return grpo_loss(step.log_prob, data.log_probs[idx, j], p["adv"][idx], step.mean, mean_ref, step.std,
                         clip_range=s.clip_range, adv_clip=s.adv_clip, kl_weight=s.kl_weight)


class FlowGRPO(Objective):
    name = "flow_grpo"
    title = "Flow-GRPO"
    summary = "Flow-GRPO: clipped-ratio policy gradient on the SDE's log-probabilities, KL to the reference"
    section = "flow_grpo"
    trajectory = True
    paradigm = "coupled"

    @property
    def forwards(self) -> tuple[str, ...]:
        return ("default", "reference") if self.settings.kl_weight > 0 else ("default",)

    def sampling_noise_level(self) -> float:
        return self.settings.rollout_noise_level()

    def sde_window(self, steps: int, draw: torch.Generator | None = None) -> tuple[int, int]:
        starts = self.settings.window_start
        if isinstance(starts, list):  # Flow-GRPO-Fast: one of the starts per iteration
            starts = starts[0 if draw is None else int(torch.randint(len(starts), (1,), generator=draw))]
        return sde_window(steps, starts, self.settings.window_size)

    def trained_steps(self, window: tuple[int, int]) -> int:
        """The window's first steps trained, in order: every step of a window of `window_size` steps (Flow-GRPO-Fast:
        flow_grpo scripts/train_sd3_fast.py trains sample.sde_window_size steps; Flow-Factory its num_sde_steps),
        else int(steps · timestep_fraction), at least 1 (flow_grpo scripts/train_sd3.py: 9 of 10)."""
        width = window[1] - window[0]
        if self.settings.window_size is not None:
            return width
        return max(1, int(width * self.settings.timestep_fraction))

    def trained_times(self, steps: int) -> int:
        return self.trained_steps(self.sde_window(steps))

    def prepare(self, data: TrainingData) -> dict:
        if data.trajectory is None or data.log_probs is None or data.window is None:
            raise ValueError("flow_grpo trains on SDE trajectories: the regenerate stage's samples have none (a run "
                             "made with another objective?)")
        device = data.latents.device
        adv = self.group_advantages(data)
        sigmas = data.sigmas
        return {"adv_np": adv, "adv": torch.as_tensor(adv, dtype=torch.float32).to(device),
                "sigmas": torch.tensor(sigmas, dtype=torch.float32).to(device),
                "sigma_max": schedule_sigma_max(sigmas)}

    def step(self, data, prepared, generators, shard):
        n_steps = self.trained_steps(data.window)
        rows = torch.arange(len(data.latents)).repeat_interleave(n_steps)
        steps = torch.arange(n_steps).repeat(len(data.latents))
        pairs = torch.stack([rows, steps], 1)
        start, stop = shard(len(pairs))
        return GrpoStep(self, data, prepared, pairs[start:stop], len(pairs))

    def old_policy_eta(self, step: int) -> float:
        return 0.0  # θ_old ← θ: the next rollouts are sampled by the policy being trained

    def summary_metrics(self, prepared: dict) -> dict[str, float]:
        return {"advantage_abs_mean": float(np.abs(prepared["adv_np"]).mean())}
