"""Reading a run config: a YAML file, a packaged config or an official preset by name, or YAML text, with `extends`
(solrl_core/config/sources.py), `--set` overrides and a tiny model's run overrides, validated by the schema
(solrl_core/config/schema.py) and checked against the registries (solrl_core/config/checks.py). Every command reads
its config through here.

Tiny models: when `model.path` is a local directory holding `solrl_tiny.yaml` (written by `solrl make-tiny`), its
values are merged over the config after `extends` and `--set`, and the `--set` overrides are applied once more, so
the command line still wins. This makes an official preset runnable on a CPU against a tiny model.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import ValidationError

from solrl_core.config.checks import registry_problem
from solrl_core.config.schema import (TINY_OVERRIDES_FILE, RunConfig, _deep_merge, _parse_mapping, apply_overrides,
                                      format_validation_error)
from solrl_core.config.sources import read_config, resolve_config
from solrl_core.errors import ConfigError
from solrl_core.excerpts import cut, one_line


PROTOCOL_KEYS = {"bench": "families", "matrix": "worlds"}  # the key of a `solrl bench` / `solrl matrix` config


def config_kind(config: str | Path) -> tuple[str, dict]:
    """("run", "bench" or "matrix", the config's YAML with its `extends` resolved): what command a config file or
    packaged name is for (a bench config lists `families`, a learning matrix `worlds`)."""
    data = read_config(resolve_config(config))
    kind = next((kind for kind, key in PROTOCOL_KEYS.items() if key in data), "run")
    return kind, data


def validate_config(data: dict, source: str = "config") -> RunConfig:
    """`data` as a RunConfig: the schema's values (pydantic), then the names the registries must know."""
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {format_validation_error(exc)}") from None
    problem = registry_problem(cfg)
    if problem:
        raise ConfigError(f"{source}: {one_line(problem)}")
    return cfg


def load_config(config: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML file or a packaged config or preset by name (`solrl_core.config.sources.resolve_config`), merge
    `extends`, apply `--set` overrides (and a tiny model's run overrides), validate."""
    path = resolve_config(config)
    return _validated(read_config(path), overrides, str(path), default_name=path.stem)


def load_config_text(text: str, overrides: list[str] | None = None, source: str = "config text") -> RunConfig:
    """A config given as YAML text, e.g. as resolved by `dump_config` (no `extends`: there is no file to resolve
    its paths against); then as `load_config`."""
    data = _parse_mapping(text, source, f"{source} is empty")
    if "extends" in data:
        raise ConfigError(f"{source}: 'extends' needs a file to resolve it against; give the config as resolved "
                          "(solrl config --show CONFIG)")
    return _validated(data, overrides, source)


def load_config_from(source: str, overrides: list[str] | None = None) -> RunConfig:
    """`source` is YAML text when it spans lines (what a training deployment carries), else a file or a packaged
    config name."""
    if "\n" in source:
        return load_config_text(source, overrides)
    return load_config(source, overrides)


def _validated(data: dict, overrides: list[str] | None, source: str, default_name: str | None = None) -> RunConfig:
    data = apply_overrides(data, overrides or [])
    data = apply_tiny_overrides(data, overrides or [])
    if default_name is not None:
        data.setdefault("name", default_name)
    return validate_config(data, source=source)


def tiny_overrides_file(data: dict) -> Path | None:
    """`model.path`/solrl_tiny.yaml when model.path is a local directory holding one (see `solrl make-tiny`)."""
    model = data.get("model")
    path = model.get("path") if isinstance(model, dict) else None
    if not isinstance(path, str) or not path:
        return None
    candidate = Path(path).expanduser() / TINY_OVERRIDES_FILE
    return candidate if candidate.is_file() else None


def apply_tiny_overrides(data: dict, overrides: list[str]) -> dict:
    """Merge the tiny model's run overrides over `data`, then the `--set` overrides again (the command line wins).
    Prints one line to stderr when it does. A tiny model of another backbone kind is a ConfigError."""
    tiny_file = tiny_overrides_file(data)
    if tiny_file is None:
        return data
    tiny = read_config(tiny_file)
    kind = (tiny.get("model") or {}).get("kind")
    wanted = data["model"].get("kind", "embedded")
    if kind is not None and kind != wanted:
        raise ConfigError(
            f"model.path {tiny_file.parent} holds a tiny '{cut(kind)}' model but model.kind is '{cut(wanted)}'; "
            "use the preset of that model"
        )
    data = apply_overrides(_deep_merge(data, tiny), overrides)
    print(f"solrl: tiny model at {tiny_file.parent}: applied its CPU run overrides ({tiny_file.name}); "
          "--set still wins", file=sys.stderr)
    return data
