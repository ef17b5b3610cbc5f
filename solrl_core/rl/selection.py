"""Which explored seeds are regenerated and trained on: per-prompt selection of candidates by proxy reward.

Ranking inside a prompt group: reward descending, ties broken by candidate index ascending (the lower index ranks
higher). "Best" are the first of that order and "worst" the last, so one total order serves every mode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from solrl_core.errors import ConfigError, SolrlError
from solrl_core.plugins import import_plugin, is_plugin, plugin_code

if TYPE_CHECKING:
    import torch

    from solrl_core.config.schema import SelectConfig


class SelectionRule:
    """How one prompt group's K seeds are picked (`select.mode`). A rule sees the group's candidates ranked best
    first (`order`), the same candidates in index order (`members`), K and a generator (for rules with `random`).
    Register a rule in SELECTION_RULES, or name one of your own package as `select.mode: package.module:Class`."""

    name: str
    summary: str
    random: bool = False  # draws with the stage's generator (seeded per run and iteration)
    even_k: bool = False  # K must be even
    every_seed: bool = False  # keeps every candidate; K is ignored (the baseline family)

    @staticmethod
    def pick(order: np.ndarray, members: np.ndarray, k: int, generator: torch.Generator | None) -> list[np.ndarray]:
        raise NotImplementedError


class BestWorst(SelectionRule):
    name, summary, even_k = "best_worst", "the K/2 best and the K/2 worst (official)", True

    @staticmethod
    def pick(order, members, k, generator):
        return [order[: k // 2], order[len(order) - k // 2:]]


class Top(SelectionRule):
    name, summary = "top", "the K best"

    @staticmethod
    def pick(order, members, k, generator):
        return [order[:k]]


class Random(SelectionRule):
    name, summary, random = "random", "K uniformly at random, without replacement", True

    @staticmethod
    def pick(order, members, k, generator):
        return [_random_pick(members, k, generator)]


class ExtremesRandom(SelectionRule):
    name, random = "extremes_random", True
    summary = "floor(K/4) best + floor(K/4) worst, the rest uniformly at random from those in between"

    @staticmethod
    def pick(order, members, k, generator):
        q = k // 4
        middle = order[q: len(order) - q]
        return [order[:q], order[len(order) - q:], _random_pick(middle, k - 2 * q, generator)]


class All(SelectionRule):
    name, summary, every_seed = "all", "every candidate (K is ignored): the baseline family", True

    @staticmethod
    def pick(order, members, k, generator):
        return [members]


SELECTION_RULES: dict[str, type[SelectionRule]] = {
    rule.name: rule for rule in (BestWorst, Random, Top, All, ExtremesRandom)
}
SELECTION_MODES = tuple(SELECTION_RULES)


def selection_rule(mode: str) -> type[SelectionRule]:
    """The rule of `select.mode`: a registered name or a "package.module:Class" plug-in (ConfigError, one line)."""
    if is_plugin(mode):
        return import_plugin(mode, SelectionRule, "select.mode")
    if mode not in SELECTION_RULES:
        raise ConfigError(f"select.mode '{mode}' is not a selection rule (known: {', '.join(SELECTION_MODES)}; or "
                          "package.module:Class)")
    return SELECTION_RULES[mode]


def _ranked(rewards: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Candidate indices of one group, best first (ties: lower index first)."""
    return members[np.lexsort((members, -rewards[members]))]


def _random_pick(pool: np.ndarray, count: int, generator: torch.Generator) -> np.ndarray:
    import torch  # only the random rules draw; config validation reads this module without torch

    perm = torch.randperm(len(pool), generator=generator).numpy()
    return pool[perm[:count]]


def select_candidates(
    rewards: np.ndarray,
    prompt_index: np.ndarray,
    k: int,
    mode: str,
    generator: torch.Generator | None = None,
) -> np.ndarray:
    """Indices (into `rewards`, sorted ascending) of the candidates kept, `k` per prompt group, by the rule `mode`
    (SELECTION_RULES or a plug-in). Groups are visited in ascending prompt id, so a given generator state gives the
    same choice on every run."""
    rewards = np.asarray(rewards, dtype=np.float64)
    prompt_index = np.asarray(prompt_index)
    if not (mode in SELECTION_RULES or ":" in mode):
        raise ValueError(f"unknown selection mode {mode!r}; expected one of {', '.join(SELECTION_MODES)}")
    rule = selection_rule(mode)
    if rewards.ndim != 1 or prompt_index.shape != rewards.shape:
        raise ValueError(
            f"rewards and prompt_index must be 1-D of equal length, got {rewards.shape} and {prompt_index.shape}"
        )
    if np.isnan(rewards).any():
        raise ValueError(f"rewards contain NaN at candidate(s) {np.flatnonzero(np.isnan(rewards))[:10].tolist()}")
    if len(rewards) == 0 or rule.every_seed:
        return np.arange(len(rewards), dtype=np.int64)
    k = int(k)
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    if rule.even_k and k % 2:
        raise ValueError(f"{rule.name} needs an even k, got {k}")
    if rule.random and generator is None:
        raise ValueError(f"selection mode {mode!r} needs a torch.Generator")

    chosen: list[np.ndarray] = []
    for prompt in np.unique(prompt_index):
        members = np.flatnonzero(prompt_index == prompt)
        if k > len(members):
            raise ValueError(f"k={k} exceeds the {len(members)} candidates of prompt {prompt}")
        with plugin_code(mode, "select.mode", "picking"):  # a plug-in's exception: one line naming it
            picked = np.concatenate(rule.pick(_ranked(rewards, members), members, k, generator))
        if len(picked) != k or len(np.unique(picked)) != k or not np.isin(picked, members).all():
            raise (SolrlError if is_plugin(mode) else ValueError)(f"selection rule {mode!r} picked {len(picked)} candidates of prompt {prompt}, not {k} "
                             "distinct ones of that prompt")
        chosen.append(picked)
    return np.sort(np.concatenate(chosen)).astype(np.int64)


def kept_per_prompt(select: SelectConfig, seeds_per_prompt: int) -> int:
    """Seeds trained on per prompt: K (`select.k`), or every explored seed for a rule that keeps them all."""
    return seeds_per_prompt if selection_rule(select.mode).every_seed else select.k
