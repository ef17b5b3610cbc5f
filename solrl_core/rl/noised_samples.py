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
        self.objective, self.data, self.prepared = objective, data, prepared
        self.pairs, self.eps, self.n_pairs = pairs, eps, n_pairs

    def __len__(self) -> int:
        return len(self.pairs)


def shard_with_noise(data: TrainingData, pairs: torch.Tensor, gen_eps: torch.Generator,
                     shard: Callable[[int], tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(this rank's pairs on the samples' device, their noise, the pairs over all ranks): the noise is rows
    [start, stop) of randn((n_pairs, *latent), generator=gen_eps), drawing only those rows."""
    n_pairs = len(pairs)
    start, stop = shard(n_pairs)
    device = data.latents.device
    eps = randn_rows(gen_eps, n_pairs, data.latents.shape[1:], start, stop).to(device)
    return pairs[start:stop].to(device), eps, n_pairs
