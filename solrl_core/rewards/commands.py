"""What `solrl rewards list` and `solrl rewards check --config CONFIG` show, as plain data (and a text table).

list_rewards(models)            one row per registered reward: what it is, what it needs, whether its files are found
check_rewards(weights, models)  one row per configured reward: files found or not, load time, scores of a sample batch
check_config_rewards(cfg)       check_rewards of a run config's training and evaluation rewards, at its image side
                                (videos of its frames for a video backbone)
format_table(rows, columns)     the rows as an aligned text table for the terminal
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.excerpts import one_line
from solrl_core.rewards.registry import REWARDS, ModelsConfig, get_reward, parse_reward_models, reward_class, spec_for
from solrl_core.rewards.tiny import sample_batch, sample_edit_batch

# The image side of the sample batch when the config's backbone does not say (a plug-in kind has no spec).
FALLBACK_IMAGE_SIZE = 64


def _files(name: str, models: ModelsConfig | None) -> tuple[bool | None, dict[str, str], str | None]:
    """(found: None when no files are needed, {key: path}, error line) for one reward."""
    cls = reward_class(name)
    if not cls.needs_weights:
        return None, {}, None
    try:
        files = cls.resolve(spec_for(name, models))
    except SolrlError as exc:
        return False, {}, str(exc)
    return True, {k: str(v) for k, v in files.items()}, None


def list_rewards(models: ModelsConfig | None = None) -> list[dict]:
    """Every registered reward: name, summary, needs, source, and whether its files are found (config/environment)."""
    if models is not None:
        models = parse_reward_models(models)
    rows = []
    for name in sorted(REWARDS):
        cls = REWARDS[name]
        found, files, error = _files(name, models)
        rows.append({
            "name": name,
            "summary": cls.summary,
            "needs": cls.needs,
            "source": cls.source,
            "weights": "not needed" if found is None else ("found" if found else "missing"),
            "found": found,
            "files": files,
            "error": error,
        })
    return rows


def check_rewards(
    weights: Mapping[str, float], models: ModelsConfig | None = None, n_images: int = 4,
    image_size: int = FALLBACK_IMAGE_SIZE, frames: int | None = None,
) -> list[dict]:
    """For each configured reward: files found or not, and its scores of a small deterministic sample batch (of
    videos of `frames` frames when given).

    Never raises for a broken reward: its row carries `ok: False` and the one-line `error`.
    """
    if models is not None:
        models = parse_reward_models(models)
    images, prompts = sample_batch(n_images, image_size, frames=frames)
    rows = []
    for name, weight in weights.items():
        row = {"name": name, "weight": float(weight), "ok": False, "found": None, "files": {}, "scores": None,
               "mean": None, "load_seconds": None, "score_seconds": None, "error": None}
        rows.append(row)
        try:
            reward_class(name)
        except SolrlError as exc:
            row["error"] = str(exc)
            continue
        row["found"], row["files"], row["error"] = _files(name, models)
        if row["found"] is False:
            continue
        try:
            start = time.perf_counter()
            reward = get_reward(name, models)
            row["load_seconds"] = round(time.perf_counter() - start, 3)
            start = time.perf_counter()
            if reward_class(name).edits:  # the editing world's answers, scored against their sources
                edited, edit_prompts, sources = sample_edit_batch(n_images, image_size)
                scores = reward(edited, edit_prompts, progress=False, sources=sources)
            else:
                scores = reward(images, prompts, progress=False)
            row["score_seconds"] = round(time.perf_counter() - start, 3)
        except SolrlError as exc:
            row["error"] = str(exc)
            continue
        except Exception as exc:  # a reward's own failure (a bug, a damaged file): the row says it, the check goes on
            row["error"] = one_line(f"{name} failed: {type(exc).__name__}: {exc}")
            continue
        row["scores"] = [float(s) for s in scores]
        row["mean"] = float(np.mean(scores))
        row["ok"] = True
    return rows


def config_image_size(cfg) -> int:
    """The side of the images a run of `cfg` scores: model.resolution, else its backbone's default (the spec's)."""
    if cfg.model.resolution is not None:
        return cfg.model.resolution
    from solrl_core.models.backbones.registry import specs_of_kind

    specs = specs_of_kind(cfg.model.kind)
    return specs[0].defaults.resolution if specs else FALLBACK_IMAGE_SIZE


def config_frames(cfg) -> int | None:
    """The frames of the videos a run of `cfg` scores: model.frames, else its backbone's default; None for images."""
    if cfg.model.frames is not None:
        return cfg.model.frames
    from solrl_core.models.backbones.registry import specs_of_kind

    specs = specs_of_kind(cfg.model.kind)
    return specs[0].defaults.frames if specs else None


def check_config_rewards(cfg, n_images: int = 4) -> list[dict]:
    """`check_rewards` of the rewards a run of `cfg` scores (training, then evaluation and gold at their weights or
    0), on sample images (or videos) of the size the run makes (`config_image_size`, `config_frames`)."""
    weights = dict(cfg.rewards)
    for name in cfg.evaluation_rewards():
        weights.setdefault(name, 0.0)
    return check_rewards(weights, cfg.reward_models, n_images=n_images, image_size=config_image_size(cfg),
                         frames=config_frames(cfg))


def format_table(rows: list[dict], columns: list[str]) -> str:
    """Aligned text table of `columns` of `rows` (lists of floats shown with 4 decimals)."""

    def cell(value) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.4f}"
        if isinstance(value, list):
            return " ".join(cell(v) for v in value)
        if isinstance(value, dict):
            return " ".join(f"{k}={v}" for k, v in value.items())
        return str(value)

    table = [columns] + [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in table)
