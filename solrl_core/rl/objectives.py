"""The objectives the update can train (`objective.name`): a registered name or a "package.module:Class" plug-in
(a subclass of `rl.objective_base.Objective`, its settings under `objective.options`)."""

from __future__ import annotations

from solrl_core.errors import ConfigError
from solrl_core.plugins import import_plugin, is_plugin
from solrl_core.rl.objective_base import Objective
from solrl_core.rl.objective_grpo import FlowGRPO
from solrl_core.rl.objective_nft import DiffusionNFT

OBJECTIVES: dict[str, type[Objective]] = {cls.name: cls for cls in (DiffusionNFT, FlowGRPO)}


def objective_class(name: str) -> type[Objective]:
    """The class of `objective.name` (ConfigError, one line, for an unknown name or a broken plug-in)."""
    if is_plugin(name):
        return import_plugin(name, Objective, "objective.name")
    if name not in OBJECTIVES:
        raise ConfigError(f"objective.name '{name}' is not an objective (known: {', '.join(OBJECTIVES)}; or "
                          "package.module:Class)")
    return OBJECTIVES[name]


def objective_for(cfg) -> Objective:
    """The run's objective with its settings (`objective.<section>`, a plug-in's `objective.options`)."""
    cls = objective_class(cfg.objective.name)
    settings = getattr(cfg.objective, cls.section) if cls.section else cfg.objective.options
    return cls(settings, cfg.train)
