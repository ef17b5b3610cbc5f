"""Plug-ins: a class named "package.module:Class" that lives outside solrl (a backbone adapter as `model.kind`, a
reward as a reward name). Nothing in solrl lists them; they are imported when named."""

from __future__ import annotations

import importlib

from solrl_core.errors import ConfigError


def is_plugin(name: str) -> bool:
    """A "package.module:Class" name rather than a registered one."""
    return ":" in name


def import_plugin(name: str, base: type, what: str) -> type:
    """The class a "package.module:Class" string names, checked to subclass `base`; ConfigError (one line, naming
    `what`, e.g. "model.kind") when the module or class is missing or of another type."""
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{what} '{name}': write a plug-in as package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what} '{name}': cannot import module '{module_name}' ({exc})") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise ConfigError(f"{what} '{name}': module '{module_name}' has no '{attr}'")
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{what} '{name}' is not a {base.__module__}.{base.__name__} subclass")
    return cls
