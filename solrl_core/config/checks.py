"""The run config checked against the registries: the names it gives (backbone kind, selection rule, objective, rewards, devices)
exist, the family's settings agree, the resolution suits the backbone. The schema (solrl_core/config/schema.py)
checks values alone; this is what needs the pieces themselves, so it sits above them."""

from __future__ import annotations

from solrl_core.config.families import family_conflict
from solrl_core.config.schema import RunConfig
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.models.backbones.registry import check_kind, resolution_problem
from solrl_core.placement import check_device_list
from solrl_core.rewards.registry import check_reward_names, parse_reward_models
from solrl_core.rl.objectives import check_objective_name
from solrl_core.rl.selection import selection_rule


def registry_problem(cfg: RunConfig) -> str | None:
    """One line naming the first setting of `cfg` the registries refuse, and the fix; None if every one is known."""
    try:
        check_kind(cfg.model.kind)
        rule = selection_rule(cfg.select.mode)
        check_objective_name(cfg.objective.name)
    except ConfigError as exc:
        return str(exc)
    if isinstance(cfg.orchestration.devices, list):
        try:
            check_device_list(cfg.orchestration.devices)
        except (ValueError, SolrlError) as exc:
            return str(exc)
    if not rule.every_seed and cfg.select.k > cfg.explore.seeds_per_prompt:
        return f"select.k ({cfg.select.k}) exceeds explore.seeds_per_prompt ({cfg.explore.seeds_per_prompt})"
    if rule.even_k and cfg.select.k % 2:
        return f"select.k must be even for {rule.name}, got {cfg.select.k}"
    try:
        parse_reward_models(cfg.reward_models)
        if cfg.eval.gold is not None:
            check_reward_names([cfg.eval.gold])
    except SolrlError as exc:
        return ("eval.gold: " if "reward_models" not in str(exc) else "") + str(exc)
    return family_conflict(cfg) or resolution_problem(cfg.model)
