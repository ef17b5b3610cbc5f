"""Plug-ins: a class named "package.module:Class" that lives outside solrl (a backbone adapter as `model.kind`, a
reward as a reward name, a selection rule as `select.mode`). Nothing in solrl lists them; they are imported when
named.

A plug-in's own code fails like a user's mistake: one line naming the plug-in and the cause (`plugin_code`), whether
its module cannot be imported, raises at import (any exception) or exits there (`sys.exit`, even with status 0: a
plug-in never ends a run with success), or its constructor or `load` raises. A SolrlError it raises itself already
says what to fix and passes unchanged. The original exception stays chained (`__cause__`) for a debugger.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

from solrl_core.errors import ConfigError, SolrlError

CAUSE_CHARS = 200  # of an exception's message quoted in the one line


def is_plugin(name: str) -> bool:
    """A "package.module:Class" name rather than a registered one."""
    return ":" in name


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message, at most CAUSE_CHARS characters of it."""
    lines = str(exc).strip().splitlines()
    message = lines[0].strip() if lines else ""
    return message[:CAUSE_CHARS] + "..." if len(message) > CAUSE_CHARS else message


def describe(exc: BaseException) -> str:
    """What went wrong in plug-in code, in a few words: "ValueError: the first line of its message", or
    "sys.exit(CODE)" for a SystemExit."""
    if isinstance(exc, SystemExit):
        return f"sys.exit({exc.code!r})"
    message = _first_line(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


@contextmanager
def plugin_code(name: str, what: str, action: str, error: type[SolrlError] = SolrlError) -> Iterator[None]:
    """Run code of `name` when it is a plug-in (`what` names its config key, e.g. "reward"; `action` what the code
    does, e.g. "load"): any exception but a SolrlError, SystemExit included, becomes `error` in one line,
    "<what> '<name>': <action> raised <describe(exc)>". A KeyboardInterrupt passes (the user's Ctrl-C). For a
    registered name nothing changes: an exception in solrl's own code is a bug and keeps its traceback."""
    if not is_plugin(name):
        yield
        return
    try:
        yield
    except SolrlError:
        raise
    except (Exception, SystemExit) as exc:
        verb = "called" if isinstance(exc, SystemExit) else "raised"
        raise error(f"{what} '{name}': {action} {verb} {describe(exc)}") from exc


def import_plugin(name: str, base: type, what: str) -> type:
    """The class a "package.module:Class" string names, checked to subclass `base`; ConfigError (one line, naming
    `what`, e.g. "model.kind") when the module is missing, raises or exits at import, or the class is missing or of
    another type."""
    module_name, _, attr = name.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"{what} '{name}': write a plug-in as package.module:Class")
    with plugin_code(name, what, f"importing module '{module_name}'", ConfigError):
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # not found, or a module it imports is not
            raise ConfigError(f"{what} '{name}': cannot import module '{module_name}' ({_first_line(exc)})") from exc
    with plugin_code(name, what, f"reading '{attr}' of module '{module_name}'", ConfigError):
        cls = getattr(module, attr, None)
    if cls is None:
        raise ConfigError(f"{what} '{name}': module '{module_name}' has no '{attr}'")
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{what} '{name}' is not a {base.__module__}.{base.__name__} subclass")
    return cls
