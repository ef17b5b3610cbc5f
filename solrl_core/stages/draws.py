"""The run's seeded draws: one generator stream per purpose, each iteration's prompts, each candidate's noise seed."""

from __future__ import annotations

import torch

from solrl_core.config.limits import MAX_ITERATIONS, MAX_PROMPTS, MAX_SEEDS, MAX_SEED
from solrl_core.config.schema import RunConfig
from solrl_core.prompts import check_train_prompts, train_prompt_set, train_sources
from solrl_core.seeds import derived_generator

# Purposes for derived random generators: each random choice has its own stream.
(PURPOSE_PROMPTS, PURPOSE_SELECT, PURPOSE_TRAIN_T, PURPOSE_TRAIN_NOISE, PURPOSE_LORA_INIT,
 PURPOSE_SDE_WINDOW) = range(6)


def iteration_order(cfg: RunConfig, iteration: int) -> list[int]:
    """The positions in the training set of one iteration's prompts: a seeded draw without replacement. A SolrlError
    when the set has fewer prompts than an iteration draws (`check_train_prompts`, also checked before a run starts:
    here for a stage run on its own)."""
    prompts = check_train_prompts(cfg)
    gen = derived_generator(cfg.seed, iteration, PURPOSE_PROMPTS)
    return torch.randperm(len(prompts), generator=gen)[: cfg.prompts.per_iteration].tolist()


def iteration_prompts(cfg: RunConfig, iteration: int) -> list[str]:
    """The prompts of one iteration (`iteration_order`)."""
    prompts = train_prompt_set(cfg)
    return [prompts[i] for i in iteration_order(cfg, iteration)]


def iteration_sources(cfg: RunConfig, iteration: int) -> list[tuple[str, ...]] | None:
    """The source images of one iteration's prompts (an edit prompt set), in `iteration_prompts`' order; None for a
    text-to-image set."""
    sources = train_sources(cfg)
    return None if sources is None else [sources[i] for i in iteration_order(cfg, iteration)]


# A run's candidate seeds lie in a block of this many (every iteration x prompt slot x candidate a run may have);
# run seed s starts its block at s times it, modulo 2**63 (the pools' int64), so that any run seed fits.
RUN_SEED_STRIDE = MAX_ITERATIONS * MAX_PROMPTS * MAX_SEEDS


def candidate_seed(cfg: RunConfig, iteration: int, prompt_slot: int, candidate: int) -> int:
    """The noise seed of candidate `candidate` of the prompt in slot `prompt_slot`: unique within a run, and a
    function of (run seed, iteration, slot, candidate) alone. Neither N (explore.seeds_per_prompt) nor the prompts
    per iteration enter it, so a family that explores fewer seeds per prompt draws the first of another's N: the
    families of one run seed share their noise (and the iteration's prompts, `iteration_prompts`: the first of one
    seeded order)."""
    within = (iteration * MAX_PROMPTS + prompt_slot) * MAX_SEEDS + candidate  # < RUN_SEED_STRIDE
    return (cfg.seed * RUN_SEED_STRIDE + within) % (MAX_SEED + 1)
