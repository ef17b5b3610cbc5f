"""The run's seeded draws: one generator stream per purpose, each iteration's prompts, each candidate's noise seed."""

from __future__ import annotations

import torch

from solrl_core.config.schema import RunConfig
from solrl_core.prompts import check_train_prompts
from solrl_core.models.seeds import derived_generator

# Purposes for derived random generators: each random choice has its own stream.
(PURPOSE_PROMPTS, PURPOSE_SELECT, PURPOSE_TRAIN_T, PURPOSE_TRAIN_NOISE, PURPOSE_LORA_INIT,
 PURPOSE_SDE_WINDOW) = range(6)


def iteration_prompts(cfg: RunConfig, iteration: int) -> list[str]:
    """The prompts of one iteration: a seeded draw without replacement. A SolrlError when the set has fewer prompts than
    an iteration draws (`check_train_prompts`, also checked before a run starts: here for a stage run on its own)."""
    prompts = check_train_prompts(cfg)
    gen = derived_generator(cfg.seed, iteration, PURPOSE_PROMPTS)
    order = torch.randperm(len(prompts), generator=gen)[: cfg.prompts.per_iteration].tolist()
    return [prompts[i] for i in order]


def candidate_seed(cfg: RunConfig, iteration: int, prompt_slot: int, candidate: int) -> int:
    """The noise seed of candidate `candidate` of the prompt in slot `prompt_slot`: unique within a run."""
    n = cfg.explore.seeds_per_prompt
    return ((cfg.seed * 100_003 + iteration) * cfg.prompts.per_iteration + prompt_slot) * n + candidate
