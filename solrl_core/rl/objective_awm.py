"""Advantage-weighted matching as an objective (AWM; scxue/advantage_weighted_matching; formulas in `rl.awm_loss`):
like DiffusionNFT it trains on the final clean samples noised again at times of their schedule (the decoupled
paradigm: any sampler makes its samples), with the flow-matching error as a log-likelihood weighted by the
advantage. θ_old is AWM's slowly following "ema" adapter: it samples the rollouts, gives the old log-likelihood of
the ratio and anchors the second KL term, and follows θ by η = min(rate · step, max) — the reference's
`off_policy: True` (its sampling adapter is then that "ema" adapter), the form this pipeline's sampling policy has."""

from __future__ import annotations

import numpy as np
import torch

from solrl_core.rl.awm_loss import awm_log_prob, awm_loss
from solrl_core.rl.nft_loss import forward_noise
from solrl_core.rl.noised_samples import NoisedSampleStep, shard_with_noise
from solrl_core.rl.objective_base import Forward, Objective, TrainingData
from solrl_core.rl.policy import old_policy_eta


def stratified_time_indices(n_steps: int, fraction: float, n_times: int, n_samples: int,
                            generator: torch.Generator) -> torch.Tensor:
    """(n_samples, n_times) schedule indices: [0, int(n_steps · fraction)) cut into n_times equal strata (integer
    bounds of linspace, as the reference's `time_type: discrete`), one uniform index in each stratum. The reference
    draws one set per micro-batch; here each sample draws its own (its pairs stay independent of the batching)."""
    bounds = torch.linspace(0, int(n_steps * fraction), n_times + 1).long()
    lower, upper = bounds[:-1], bounds[1:]
    u = torch.rand((n_samples, n_times), generator=generator)
    return (lower + (u * (upper - lower)).long()).clamp(max=n_steps - 1)


class AwmStep(NoisedSampleStep):
    def loss(self, start: int, stop: int, forward: Forward):
        s = self.objective.settings
        idx, tix = self.pairs[start:stop].unbind(1)
        x0, t, eps = self.data.latents[idx], self.prepared["times"][tix], self.eps[start:stop]
        x_t = forward_noise(x0, t, eps)
        with torch.no_grad():
            v_old = forward("old", x_t, t, idx)
            v_ref = forward("reference", x_t, t, idx) if s.kl_weight > 0 else None
        v = forward("default", x_t, t, idx)
        log_prob = awm_log_prob(v, eps, x0, t, s.ghuber_power)
        log_prob_old = awm_log_prob(v_old, eps, x0, t, s.ghuber_power)
        return awm_loss(log_prob, log_prob_old, self.prepared["adv"][idx], v, v_old, v_ref, adv_clip=s.adv_clip,
                        advantage_max=s.advantage_max, clip_range=s.clip_range, kl_weight=s.kl_weight,
                        old_kl_weight=s.old_kl_weight)


class AWM(Objective):
    name = "awm"
    title = "AWM"
    summary = "AWM: advantage-weighted flow matching on the final samples, KL to the reference and to θ_old"
    section = "awm"

    @property
    def forwards(self) -> tuple[str, ...]:
        return ("old", "reference", "default") if self.settings.kl_weight > 0 else ("old", "default")

    def trained_times(self, steps: int) -> int:
        return self.settings.times_per_sample

    def prepare(self, data: TrainingData) -> dict:
        device = data.latents.device
        adv = self.group_advantages(data)
        return {"adv_np": adv, "adv": torch.as_tensor(adv, dtype=torch.float64).to(device),
                "times": torch.tensor(data.sigmas[:-1], dtype=torch.float32).to(device)}

    def step(self, data, prepared, generators, shard):
        gen_t, gen_eps = generators
        n_samples, n_times = len(data.latents), len(prepared["times"])
        per_sample = self.settings.times_per_sample
        times = stratified_time_indices(n_times, self.settings.timestep_fraction, per_sample, n_samples, gen_t)
        pairs = torch.stack([torch.arange(n_samples).repeat_interleave(per_sample), times.reshape(-1)], 1)
        return AwmStep(self, data, prepared, *shard_with_noise(data, pairs, gen_eps, shard))

    def old_policy_eta(self, step: int) -> float:
        return old_policy_eta(step, rate=self.settings.old_eta_rate, max_eta=self.settings.old_eta_max)

    def summary_metrics(self, prepared: dict) -> dict[str, float]:
        return {"advantage_abs_mean": float(np.abs(prepared["adv_np"]).mean())}
