"""The configs that ship with solrl (the top-level `configs` package: the repository's configs/ folder, installed
as package data) and what a CONFIG argument names: a YAML file, or one of these by name.

A packaged config's name is its path under configs/ without `.yaml`, the presets' without `presets/` too: `demo`,
`bench`, `families/sol_rl`, `flux1_sol_rl_pickscore`. The parts (configs/parts/) are pieces the presets extend, not
configs of their own, and have no name; neither has what solrl measured of its configs (configs/measured/: the
learning matrix's verdicts). A file that exists wins over a name; `configs/presets/X.yaml` as the docs
write it names the packaged preset X where no such file exists (outside a checkout).
"""

from __future__ import annotations

import difflib
from pathlib import Path

import configs
from solrl_core.errors import ConfigError

CONFIGS_DIR = Path(configs.__file__).resolve().parent
PRESETS_SUBDIR = "presets"
PARTS_SUBDIR = "parts"
MEASURED_SUBDIR = "measured"
_SUFFIXES = (".yaml", ".yml")


def packaged_configs() -> dict[str, Path]:
    """Name -> file of every packaged config: the top-level ones and the families first, then the presets."""
    found = {}
    for path in sorted(CONFIGS_DIR.rglob("*.yaml"), key=lambda p: (p.parent.name == PRESETS_SUBDIR, p)):
        relative = path.relative_to(CONFIGS_DIR)
        if relative.parts[0] in (PARTS_SUBDIR, MEASURED_SUBDIR):
            continue
        if relative.parts[0] == PRESETS_SUBDIR:
            relative = relative.relative_to(PRESETS_SUBDIR)
        found[relative.with_suffix("").as_posix()] = path
    return found


def packaged_name(path: str | Path) -> str | None:
    """The name of the packaged config at `path`, or None when `path` is no packaged config."""
    resolved = Path(path).resolve()
    return next((name for name, file in packaged_configs().items() if file == resolved), None)


def _as_name(text: str) -> str:
    """`configs/presets/x.yaml`, `presets/x.yml`, `x.yaml` -> `x`: the forms the docs and a checkout use."""
    name = text.strip().replace("\\", "/")
    for prefix in ("./", "configs/", f"{PRESETS_SUBDIR}/"):
        name = name.removeprefix(prefix)
    for suffix in _SUFFIXES:
        name = name.removesuffix(suffix)
    return name


def packaged_config(name: str) -> Path | None:
    """The packaged config `name` names (`demo`, `demo.yaml`, `presets/x.yaml`, ...), or None."""
    return packaged_configs().get(_as_name(name))


def resolve_config(config: str | Path) -> Path:
    """The YAML file a CONFIG argument names: the file itself when there is one, else the packaged config of that name
    (else the path, when it is something else that exists: reading it says what is wrong).
    ConfigError in one line for neither, with the closest packaged names and where to list them all."""
    path = Path(config).expanduser()
    if path.is_file():
        return path
    known = packaged_configs()
    name = _as_name(str(config))
    if name in known:
        return known[name]
    if path.exists():  # a directory, say: the reader says what is wrong with it
        return path
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ConfigError(f"config not found: {config} is neither a file nor a packaged config ({hint}`solrl presets` "
                      "lists them)")
