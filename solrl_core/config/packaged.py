"""The config files that ship with solrl (`solrl.configs`: the repository's configs/ folder,
installed as package data), by name.

A packaged file's name is its path under configs/ without `.yaml`: `demo`, `bench`, `families/sol_rl`. The parts
(configs/parts/) are the pieces the official presets compose, not configs of their own, and have no name; neither
has what solrl measured of its configs (configs/measured/: the learning matrix's verdicts). The presets are names,
not files (solrl_core/config/presets.py); solrl_core/config/sources.py resolves a CONFIG argument to either.
"""

from __future__ import annotations

from pathlib import Path

import solrl.configs as configs

CONFIGS_DIR = Path(configs.__file__).resolve().parent
PRESETS_SUBDIR = "presets"
PARTS_SUBDIR = "parts"
MEASURED_SUBDIR = "measured"
_SUFFIXES = (".yaml", ".yml")


def packaged_files() -> dict[str, Path]:
    """Name -> file of every packaged config file (the top-level ones and the families)."""
    found = {}
    for path in sorted(CONFIGS_DIR.rglob("*.yaml")):
        relative = path.relative_to(CONFIGS_DIR)
        if relative.parts[0] in (PARTS_SUBDIR, MEASURED_SUBDIR):
            continue
        found[relative.with_suffix("").as_posix()] = path
    return found


def as_name(text: str) -> str:
    """`configs/presets/x.yaml`, `presets/x.yml`, `x.yaml` -> `x`: the forms the docs and a checkout use."""
    name = text.strip().replace("\\", "/")
    for prefix in ("./", "configs/", f"{PRESETS_SUBDIR}/"):
        name = name.removeprefix(prefix)
    for suffix in _SUFFIXES:
        name = name.removesuffix(suffix)
    return name
