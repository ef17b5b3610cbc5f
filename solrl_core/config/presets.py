"""The official presets, by name: `<model>_<family>_<reward>` trained with DiffusionNFT (the method's objective), and
`<objective>/<model>_<family>_<reward>` for each other objective with a part in configs/parts/objectives/.

A preset is not a file: its name resolves, when a command reads it, to the shared pieces it composes (later ones
win, key by key):

1. configs/parts/official.yaml, the settings every backbone shares (docs/method.md);
2. the model's values its backbone spec holds (`BackboneSpec.part_values`: kind, resolution, sampler, text length,
   quantization rule, micro-batch, timestep fraction, gradient clip), written nowhere else;
3. configs/parts/models/<model>.yaml, what the spec does not hold (the hub path, the evaluation steps, guidance);
4. configs/parts/families/<family>.yaml;
5. configs/parts/models/<model>/<family>.yaml where there is one: the model's own values in that family (a few-step
   model's step counts), which win over the family's;
6. configs/parts/rewards/<reward>.yaml;
7. for another objective, configs/parts/objectives/<objective>.yaml and, where a peer publishes that objective's
   values for the model, configs/parts/objectives/<objective>/<model>.yaml.

So a new backbone adds its spec and a model part, and its presets exist. The models are the backbone specs with a
part in parts/models/, the rewards the registered rewards with a part in parts/rewards/. A model is paired with the
rewards of its kind (`model_rewards`): an editing model (its spec's `edits`) with the rewards that score edits (their
class's `edits`: they read each prompt's source images, which only an edit prompt set has), every other model with
the rewards that do not (an editing model's presets train on edit prompts, which a text-to-image reward would score
as captions). `solrl presets` lists them;
`solrl presets --write NAME FILE` writes one resolved, a file to edit; `describe` says what its settings are (the
official ones, or for a model without an official Sol-RL setting, what they are instead: the spec's `settings`).

Where the docs write `configs/presets/NAME.yaml`, that is the preset's name too (`preset_path`: where its file would
be, which the readers of solrl_core/config/sources.py resolve to the pieces above).
"""

from __future__ import annotations

import copy
import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from solrl_core.config.families import FAMILIES
from solrl_core.config.packaged import CONFIGS_DIR, PARTS_SUBDIR, PRESETS_SUBDIR
from solrl_core.config.schema import ObjectiveConfig, _deep_merge, _parse_mapping
from solrl_core import renamed
from solrl_core.errors import ConfigError
from solrl_core.models.backbones.registry import backbone_specs
from solrl_core.rewards.registry import REWARDS as REGISTERED_REWARDS
from solrl_core.rl.objectives import OBJECTIVES as OBJECTIVE_NAMES, objective_class
from solrl_core.userfiles import read_text

PRESETS_DIR = CONFIGS_DIR / PRESETS_SUBDIR  # where no file is: a preset's path names it (`preset_path`)
PARTS_DIR = CONFIGS_DIR / PARTS_SUBDIR
OBJECTIVES_DIR = PARTS_DIR / "objectives"
HEADER_WIDTH = 120  # `describe` wraps to this

MODEL_SPECS = {s.key: s for s in backbone_specs() if s.part.is_file()}  # models with a part in parts/models/
MODELS = tuple(MODEL_SPECS)
# rewards with a part in parts/rewards/, in the reward registry's order
PRESET_REWARDS = {name: cls for name, cls in REGISTERED_REWARDS.items()
                  if (PARTS_DIR / "rewards" / f"{name}.yaml").is_file()}
REWARDS = tuple(PRESET_REWARDS)
# objectives with a part in parts/objectives/ (DiffusionNFT, the default, is official.yaml's), in the registry's order
PRESET_OBJECTIVES = tuple(name for name in OBJECTIVE_NAMES if (OBJECTIVES_DIR / f"{name}.yaml").is_file())

TITLES = {
    **{key: spec.title for key, spec in MODEL_SPECS.items()},
    **{name: cls.title or name for name, cls in PRESET_REWARDS.items()},
}


@dataclass(frozen=True)
class Preset:
    model: str  # a backbone spec's key
    family: str
    reward: str
    objective: str | None = None  # None: DiffusionNFT, the method's

    @property
    def name(self) -> str:
        """`<model>_<family>_<reward>`, under `<objective>/` for an objective other than DiffusionNFT."""
        stem = f"{self.model}_{self.family}_{self.reward}"
        return f"{self.objective}/{stem}" if self.objective else stem

    @property
    def run_name(self) -> str:
        """The run's name (runs/<name>/, the MLflow run): the preset's, another objective's name as a prefix, so the
        objectives' runs of one model, family and reward do not share a run directory."""
        return self.name.replace("/", "_")

    def pieces(self) -> list[Path | dict]:
        """What the preset composes, in order (the module docstring): part files, and the spec's values as a mapping."""
        spec_values = _nested(MODEL_SPECS[self.model].part_values())
        pieces: list[Path | dict] = [PARTS_DIR / "official.yaml", spec_values, MODEL_SPECS[self.model].part,
                                     PARTS_DIR / "families" / f"{self.family}.yaml"]
        pieces += _existing(PARTS_DIR / "models" / self.model / f"{self.family}.yaml")
        pieces.append(PARTS_DIR / "rewards" / f"{self.reward}.yaml")
        if self.objective:
            pieces.append(OBJECTIVES_DIR / f"{self.objective}.yaml")
            pieces += _existing(OBJECTIVES_DIR / self.objective / f"{self.model}.yaml")
        return pieces

    def data(self) -> dict[str, Any]:
        """The preset's keys: its pieces merged in order, and another objective's run name (a DiffusionNFT preset's
        is its name, as any config's is its file's stem; a config that extends one is named after its own file)."""
        merged: dict[str, Any] = {}
        for piece in self.pieces():
            merged = _deep_merge(merged, piece if isinstance(piece, dict) else _read_part(piece))
        merged = copy.deepcopy(merged)  # the parts' mappings are cached: the caller may change its own
        return _deep_merge(merged, {"name": self.run_name}) if self.objective else merged


def _existing(path: Path) -> list[Path]:
    return [path] if path.is_file() else []


def _nested(dotted: dict[str, Any]) -> dict[str, Any]:
    """{"a.b": 1} -> {"a": {"b": 1}}."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        *parents, last = key.split(".")
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
        node[last] = value
    return out


@cache
def _read_part(path: Path) -> dict[str, Any]:
    """A part's keys (a plain mapping: parts extend nothing)."""
    data = _parse_mapping(read_text(path, "preset part"), str(path), f"preset part {path} is empty")
    if "extends" in data:
        raise ConfigError(f"{path}: a preset part extends nothing (the preset lists its parts: "
                          "solrl_core/config/presets.py)")
    return data


def model_rewards(model: str) -> tuple[str, ...]:
    """The preset rewards `model`'s presets train on, in `REWARDS`' order: the ones that score edits for an editing
    model, the others for the rest (the module docstring)."""
    edits = MODEL_SPECS[model].edits
    return tuple(name for name, cls in PRESET_REWARDS.items() if cls.edits == edits)


@cache
def presets() -> dict[str, Preset]:
    """Name -> preset, DiffusionNFT's first, then each other objective's."""
    every = (Preset(m, f, r, o) for o in (None, *PRESET_OBJECTIVES) for m in MODELS for f in FAMILIES
             for r in model_rewards(m))
    return {p.name: p for p in every}


def preset_name(model: str, family: str, reward: str, objective: str | None = None) -> str:
    return Preset(model, family, reward, objective).name


def preset_models() -> dict[str, str]:
    """Preset name -> its model (the backbone key: several models may share a `model.kind`, as sd35l and sd35m)."""
    return {name: p.model for name, p in presets().items()}


def preset_path(name: str) -> Path:
    """configs/presets/<name>.yaml: the name as the docs write it (no file is there)."""
    return PRESETS_DIR / f"{name}.yaml"


def preset_at(path: Path) -> Preset | None:
    """The preset `path` names (`preset_path`), when it names one and no file is there."""
    path = Path(path)
    if path.is_file():
        return None
    try:
        name = path.resolve().relative_to(PRESETS_DIR.resolve()).with_suffix("").as_posix()
    except ValueError:
        return None
    known = presets()
    return known.get(name) or known.get(renamed.config_name(name, known) or "")


def objective_part(model: str, objective: str) -> Path | None:
    """parts/objectives/<objective>/<model>.yaml, the objective's values for that model, where a peer has them."""
    path = OBJECTIVES_DIR / objective / f"{model}.yaml"
    return path if path.is_file() else None


def describe(name: str) -> str:
    """What the preset `name` is and what its settings are (its backbone spec's `settings`: official, or where a
    model has no official setting, what they are instead; for another objective, where its values come from), as
    comment lines wrapped to 120 columns."""
    p = presets()[name]
    what = f"{TITLES[p.model]}, {p.family}, trained on {TITLES[p.reward]}: {MODEL_SPECS[p.model].settings}."
    if p.objective:
        source = (f"configs/parts/objectives/{p.objective}/{p.model}.yaml" if objective_part(p.model, p.objective)
                  else f"configs/parts/objectives/{p.objective}.yaml")
        default = objective_class(ObjectiveConfig.model_fields["name"].default).title
        what += (f" Objective {objective_class(p.objective).title} instead of {default}, its values from {source} "
                 "(each names its source).")
    lines = textwrap.wrap(what, HEADER_WIDTH - 2, break_on_hyphens=False, break_long_words=False)
    return "".join(f"# {line}\n" for line in lines)
