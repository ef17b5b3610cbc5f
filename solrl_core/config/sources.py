"""What a CONFIG argument names, and a config's keys read with its `extends`.

A CONFIG is a YAML file, or the name of a config that ships with solrl: a packaged file (configs/: `demo`, `bench`,
`families/sol_rl`, solrl_core/config/packaged.py) or an official preset (`flux1_sol_rl_pickscore`,
`awm/flux1_sol_rl_pickscore`, solrl_core/config/presets.py). A file that exists wins over a name; the docs' form
`configs/presets/X.yaml` names the preset X. A name stands for a path everywhere a path is passed on: a preset's is
where its file would be (`preset_path`), which `read_config` reads as the preset's pieces.

`extends: other.yaml` or `extends: [a.yaml, b.yaml, ...]` names files relative to the extending file (else a
packaged config or preset of that name); the list merges in order, later files win; mappings merge key by key, the
extending file wins over all of them.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from solrl_core.config.packaged import as_name, packaged_files
from solrl_core import renamed
from solrl_core.config.presets import preset_at, preset_path, presets
from solrl_core.config.schema import _deep_merge, _parse_mapping
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.excerpts import cut
from solrl_core.userfiles import read_text


def packaged_configs() -> dict[str, Path]:
    """Name -> path of every config that ships: the packaged files, then the presets (`preset_path`)."""
    return {**packaged_files(), **{name: preset_path(name) for name in presets()}}


def packaged_config(name: str) -> Path | None:
    """The packaged config or preset `name` names (`demo`, `demo.yaml`, `configs/presets/x.yaml`, ...), or None."""
    name = as_name(name)
    files, known = packaged_files(), presets()
    current = name if name in files or name in known else renamed.config_name(name, (*files, *known))
    if current in files:
        return files[current]
    return preset_path(current) if current in known else None


def packaged_name(path: str | Path) -> str | None:
    """The name of the packaged config or preset at `path`, or None when `path` names neither."""
    preset = preset_at(Path(path))
    if preset is not None:
        return preset.name
    resolved = Path(path).resolve()
    return next((name for name, file in packaged_files().items() if file == resolved), None)


def resolve_config(config: str | Path) -> Path:
    """The path a CONFIG argument names: the file itself when there is one, else the packaged config or preset of
    that name (else the path, when it is something else that exists: reading it says what is wrong).
    ConfigError in one line for neither, with the closest names and where to list them all."""
    path = Path(config).expanduser()
    if path.is_file() or preset_at(path) is not None:
        return path
    known = packaged_config(str(config))
    if known is not None:
        return known
    if path.exists():  # a directory, say: the reader says what is wrong with it
        return path
    close = difflib.get_close_matches(as_name(str(config)), list(packaged_configs()), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise ConfigError(f"config not found: {config} is neither a file nor a packaged config ({hint}`solrl presets` "
                      "lists them)")


def read_config(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """The keys of the config at `path` (a file, or a preset's path), its `extends` merged in."""
    preset = preset_at(path)
    if preset is not None:
        return preset.data()
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: 'extends' forms a cycle")
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    try:
        text = read_text(path, "config")
    except SolrlError as exc:
        raise ConfigError(str(exc)) from None
    data = _parse_mapping(text, str(path), f"config file {path} is empty; write the settings to change (e.g. "
                          "extends: demo.yaml plus the keys that differ)")
    parents = data.pop("extends", None)
    if not data and not parents:  # `extends: []` (or null) and nothing else: a run of every default, asked by no one
        raise ConfigError(f"config file {path} sets nothing (an empty 'extends' and no keys); name the config it "
                          "starts from (extends: demo.yaml) or write the settings")
    if parents is None:
        return data
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise ConfigError(f"{path}: 'extends' must be a file name or a list of file names")
    base: dict = {}
    for parent in parents:  # in order: later files win
        base = _deep_merge(base, read_config(_extended(path, parent), seen + (path,)))
    return _deep_merge(base, data)


def _extended(path: Path, parent: str) -> Path:
    """The file `extends: parent` in config `path` names: relative to `path`'s folder, else a packaged config or
    preset of that name (`extends: demo.yaml` from a config of your own, beside no copy of demo.yaml)."""
    local = path.parent / parent
    if local.exists() or preset_at(local) is not None:  # a file, or a preset by the path the docs write
        return local
    packaged = packaged_config(parent)
    if packaged is None:
        raise ConfigError(f"{path}: extends '{cut(parent)}', not found: neither a file beside it ({local}) nor a "
                          "packaged config (`solrl presets` lists them)")
    return packaged
