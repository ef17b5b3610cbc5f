"""DiffusionNFT as an objective (the method's reference loss; docs/method.md): it trains on the final clean samples,
noised again at random times of their schedule, with three forwards per (sample, time) pair (θ, θ_old, W0). Any
sampler can make its samples (the decoupled paradigm). θ_old follows θ by the soft update of `train.old_eta_*`."""

from __future__ import annotations

import math

import numpy as np
import torch

from solrl_core.rl.advantages import optimality
from solrl_core.rl.nft_loss import forward_noise, nft_loss
from solrl_core.rl.noised_samples import NoisedSampleStep, shard_with_noise
from solrl_core.rl.objective_base import Forward, Objective, TrainingData
from solrl_core.rl.policy import old_policy_eta


def times_per_sample(n_times: int, fraction: float) -> int:
    """How many of the schedule's `n_times` times each sample trains on: ceil(fraction · n_times), at least 1."""
    return max(1, math.ceil(fraction * n_times - 1e-9))


def training_pairs(n_samples: int, n_times: int, fraction: float, generator: torch.Generator) -> torch.Tensor:
    """(sample, time-index) pairs: each sample trains on its own random subset of the schedule's times."""
    per_sample = times_per_sample(n_times, fraction)
    rows = [
        torch.stack([torch.full((per_sample,), i), torch.randperm(n_times, generator=generator)[:per_sample]], 1)
        for i in range(n_samples)
    ]
    return torch.cat(rows)


class NftStep(NoisedSampleStep):
    def loss(self, start: int, stop: int, forward: Forward):
        s = self.objective.settings
        idx, tix = self.pairs[start:stop].unbind(1)
        x0, t = self.data.latents[idx], self.prepared["times"][tix]
        x_t = forward_noise(x0, t, self.eps[start:stop])
        with torch.no_grad():
            v_old = forward("old", x_t, t, idx)
            v_ref = forward("reference", x_t, t, idx)
        v = forward("default", x_t, t, idx)
        return nft_loss(v, v_old, v_ref, x_t, x0, t, self.prepared["r"][idx], beta=s.beta, adv_clip=s.adv_clip,
                        kl_weight=s.kl_weight)


class DiffusionNFT(Objective):
    name = "diffusionnft"
    title = "DiffusionNFT"
    summary = "DiffusionNFT: implicit positive / negative policies around θ_old on the final samples (official)"
    section = "diffusionnft"
    forwards = ("old", "reference", "default")

    def trained_times(self, steps: int) -> int:
        return times_per_sample(steps, self.train.timestep_fraction)

    def prepare(self, data: TrainingData) -> dict:
        device = data.latents.device
        adv = self.group_advantages(data)
        return {
            "adv": adv,
            "r": torch.as_tensor(optimality(adv, clip=self.settings.adv_clip), dtype=torch.float32).to(device),
            "times": torch.tensor(data.sigmas[:-1], dtype=torch.float32).to(device),  # terminal 0 excluded
        }

    def step(self, data, prepared, generators, shard):
        gen_t, gen_eps = generators
        pairs = training_pairs(len(data.latents), len(prepared["times"]), self.train.timestep_fraction, gen_t)
        return NftStep(self, data, prepared, *shard_with_noise(data, pairs, gen_eps, shard))

    def old_policy_eta(self, step: int) -> float:
        return old_policy_eta(step, rate=self.train.old_eta_rate, max_eta=self.train.old_eta_max)

    def summary_metrics(self, prepared: dict) -> dict[str, float]:
        return {"advantage_abs_mean": float(np.abs(prepared["adv"]).mean())}
