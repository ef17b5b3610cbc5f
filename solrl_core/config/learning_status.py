"""What the learning matrix measured of each objective × family on the embedded testbed:
configs/measured/learning_status.yaml, written by `solrl matrix configs/learning_matrix.yaml --status
configs/measured/learning_status.yaml` from the committed report (docs/learning-matrix/), read by `solrl presets`
and `solrl train`.

A config's cell is its world (edit for an editing model, video when its backbone makes videos, else image), its
objective and its family: a FLUX.1 preset trained with Flow-GRPO in the sol_rl family is the cell
image/flow_grpo/sol_rl, FLUX.1 Kontext's edit/diffusionnft/sol_rl. A cell that did not rise with its interval above 0
there — or that the matrix did not train — is experimental, and both commands say so with the measured numbers. Torch-free: the commands read it before anything loads.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import yaml

from solrl_core.config.packaged import CONFIGS_DIR, MEASURED_SUBDIR
from solrl_core.config.schema import RunConfig, load_yaml
from solrl_core.errors import SolrlError

STATUS_FILE = CONFIGS_DIR / MEASURED_SUBDIR / "learning_status.yaml"
REPORT = "docs/learning-matrix/report.md"


def read_status(path: Path = STATUS_FILE) -> dict[str, dict]:
    """Cell -> its entry (verdict, rise, interval, seeds, iterations, metric, source); {} without a file."""
    if not path.is_file():
        return {}
    data = load_yaml(path.read_text(encoding="utf-8"), str(path)) or {}
    if not isinstance(data, dict):
        raise SolrlError(f"{path}: expected a mapping of cells (world/objective/family) to their status")
    return data


def write_status(path: Path, entries: dict[str, dict], command: str | None = None) -> Path:
    """Write `entries` (cell -> entry) as the YAML `read_status` reads, headed by what made it."""
    date = _dt.date.today().isoformat()
    head = (f"# The learning matrix's verdict per cell (world/objective/family), written {date} by\n"
            f"#   {command or 'solrl matrix'} --status {path.name}\n"
            f"# from its report ({REPORT} keeps the committed one and its per-seed numbers). `solrl presets` and\n"
            "# `solrl train` read it: a cell that does not rise is experimental. Regenerate, do not edit.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + yaml.safe_dump(entries, sort_keys=False, width=120), encoding="utf-8")
    return path


def world_of(cfg: RunConfig) -> str:
    """"edit" when the config's backbone is an editing model (its spec's `edits`), "video" when it makes videos (its
    spec has frames; a plug-in's: model.frames), else "image"."""
    from solrl_core.models.backbones.registry import edits_images, makes_videos

    if edits_images(cfg.model):
        return "edit"
    videos = makes_videos(cfg.model)
    return "video" if (cfg.model.frames if videos is None else videos) else "image"


def cell_of(cfg: RunConfig) -> str:
    return f"{world_of(cfg)}/{cfg.objective.name}/{cfg.family}"


def cell_status(cfg: RunConfig, status: dict[str, dict] | None = None) -> tuple[str, dict | None]:
    """(the config's cell, its entry or None when the matrix did not train it)."""
    cell = cell_of(cfg)
    return cell, (read_status() if status is None else status).get(cell)


def learning_label(entry: dict | None) -> str:
    """A short label for listings: "rises", or "experimental"."""
    return "rises" if entry and entry.get("verdict") == "rises" else "experimental"


def learning_note(cfg: RunConfig, status: dict[str, dict] | None = None) -> str | None:
    """One line for a config whose cell is experimental (did not rise in the learning matrix, or was not trained
    there), with the measured numbers; None for a cell that rises."""
    cell, entry = cell_status(cfg, status)
    if entry is not None and entry.get("verdict") == "rises":
        return None
    if entry is None:
        return (f"{cell} is experimental: the learning matrix has not trained this objective x family on the "
                f"embedded {cell.split('/')[0]} testbed, so nothing shows it learns ({REPORT})")
    lo, hi = entry.get("interval") or (None, None)
    interval = f" [{lo:+.4f}, {hi:+.4f}]" if lo is not None and hi is not None else ""
    rise = entry.get("rise")
    shown = f"{rise:+.4f}{interval}" if rise is not None else "not measured"
    return (f"{cell} is experimental: in the learning matrix its held-out {entry.get('metric', 'reward')} "
            f"{entry['verdict']} on the embedded testbed ({shown} over {entry.get('seeds')} seeds, "
            f"{entry.get('iterations')} iterations; {REPORT})")
