"""The objectives the update can train (`objective.name`): a registered name or a "package.module:Class" plug-in
(a subclass of `rl.objective_base.Objective`, its settings under `objective.options`).

The registry names each objective's class by module, loaded when a run needs it: config validation checks the name
without importing torch.
"""

from __future__ import annotations

import importlib

from solrl_core.errors import ConfigError
from solrl_core.plugins import import_plugin, is_plugin
from solrl_core.rl.objective_base import Objective

OBJECTIVES: dict[str, str] = {
    "diffusionnft": "solrl_core.rl.objective_nft:DiffusionNFT",
    "flow_grpo": "solrl_core.rl.objective_grpo:FlowGRPO",
    "awm": "solrl_core.rl.objective_awm:AWM",
}


def check_objective_name(name: str) -> None:
    """ConfigError (one line) for an unknown objective name or a plug-in that is no Objective."""
    if is_plugin(name):
        import_plugin(name, Objective, "objective.name")
    elif name not in OBJECTIVES:
        raise ConfigError(f"objective.name '{name}' is not an objective (known: {', '.join(OBJECTIVES)}; or "
                          "package.module:Class)")


def objective_class(name: str) -> type[Objective]:
    """The class of `objective.name` (ConfigError, one line, for an unknown name or a broken plug-in)."""
    check_objective_name(name)
    if is_plugin(name):
        return import_plugin(name, Objective, "objective.name")
    module, _, attr = OBJECTIVES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def objective_for(cfg) -> Objective:
    """The run's objective with its settings (`objective.<section>`, a plug-in's `objective.options`)."""
    cls = objective_class(cfg.objective.name)
    settings = getattr(cfg.objective, cls.section) if cls.section else cfg.objective.options
    return cls(settings, cfg.train)
