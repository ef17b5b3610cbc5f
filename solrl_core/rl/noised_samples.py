"""What the decoupled objectives (DiffusionNFT, AWM) share: they train on the final clean samples noised again at
(sample, time) pairs, each pair with its own noise; a rank draws only its share of that noise."""

from __future__ import annotations

from collections.abc import Callable

import torch

from solrl_core.seeds import randn_rows
from solrl_core.rl.objective_base import ObjectiveStep, TrainingData


class NoisedSampleStep(ObjectiveStep):
    """One optimizer step's (sample, time-index) pairs of this rank and their noise; `loss` is the objective's."""

    def __init__(self, objective, data: TrainingData, prepared: dict, pairs: torch.Tensor, eps: torch.Tensor,
                 n_pairs: int):
        """`pairs`: this rank's (sample, time-index) pairs on the CPU (kept there for `row_times`; moved once)."""
        self.objective, self.data, self.prepared = objective, data, prepared
        self.host_pairs = pairs
        self.pairs, self.eps, self.n_pairs = pairs.to(data.latents.device), eps, n_pairs

    def __len__(self) -> int:
        return len(self.pairs)

    def row_times(self, start: int, stop: int) -> list[float]:
        """The schedule's σ at each pair's time index (the objective's times are the schedule's, terminal 0 out)."""
        return [self.data.sigmas[t] for t in self.host_pairs[start:stop, 1].tolist()]


def shard_with_noise(data: TrainingData, pairs: torch.Tensor, gen_eps: torch.Generator,
                     shard: Callable[[int], tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(this rank's pairs, still on the CPU, their noise on the samples' device, the pairs over all ranks): the noise
    is rows [start, stop) of randn((n_pairs, *latent), generator=gen_eps), drawing only those rows."""
    n_pairs = len(pairs)
    start, stop = shard(n_pairs)
    device = data.latents.device
    eps = randn_rows(gen_eps, n_pairs, data.latents.shape[1:], start, stop).to(device)
    return pairs[start:stop], eps, n_pairs
