"""The official presets: configs/presets/<model>_<family>_<reward>.yaml, one per model × family × reward, trained
with DiffusionNFT (the method's objective); and the same for each other objective with a part in
configs/parts/objectives/: configs/presets/<objective>/<model>_<family>_<reward>.yaml.

Each preset is a short generated file whose one key, `extends`, lists the shared parts in configs/parts/
(official.yaml, then one file each of models/, families/ and rewards/, then the objective's part and its part for
that model where there is one; later files win), so a value lives in exactly one place. The models are the backbone specs with a part in parts/models/, the rewards the registered rewards with a
part in parts/rewards/. Each preset's header says what its settings are: the official ones (docs/method.md) or, for
a model without an official Sol-RL setting (SD3.5-Medium, Qwen-Image), what they are instead (the backbone spec's
`settings`; its part names each value's source). Regenerate after changing the families below or adding a part (a
test checks the checked-in files equal this output):

    python -m solrl_core.config.presets            # rewrite configs/presets/
    python -m solrl_core.config.presets --check    # exit 1 if a preset differs or is missing (or one is left over)
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from solrl_core.models.backbones.registry import backbone_specs
from solrl_core.config.families import FAMILIES
from solrl_core.config.schema import ObjectiveConfig
from solrl_core.config.packaged import CONFIGS_DIR, PRESETS_SUBDIR
from solrl_core.rewards.registry import REWARDS as REGISTERED_REWARDS
from solrl_core.rl.objectives import OBJECTIVES as OBJECTIVE_NAMES, objective_class

PRESETS_DIR = CONFIGS_DIR / PRESETS_SUBDIR
HEADER_WIDTH = 120  # the header's comment lines are wrapped to this

MODEL_SPECS = {s.key: s for s in backbone_specs() if s.part.is_file()}  # models with a part in parts/models/
MODELS = tuple(MODEL_SPECS)
# rewards with a part in parts/rewards/, in the reward registry's order
PRESET_REWARDS = {name: cls for name, cls in REGISTERED_REWARDS.items()
                  if (CONFIGS_DIR / "parts" / "rewards" / f"{name}.yaml").is_file()}
REWARDS = tuple(PRESET_REWARDS)
OBJECTIVES_DIR = CONFIGS_DIR / "parts" / "objectives"
# objectives with a part in parts/objectives/ (DiffusionNFT, the default, is official.yaml's), in the registry's order
PRESET_OBJECTIVES = tuple(name for name in OBJECTIVE_NAMES if (OBJECTIVES_DIR / f"{name}.yaml").is_file())

TITLES = {
    **{key: spec.title for key, spec in MODEL_SPECS.items()},
    **{name: cls.title or name for name, cls in PRESET_REWARDS.items()},
}

def preset_name(model: str, family: str, reward: str, objective: str | None = None) -> str:
    """`<model>_<family>_<reward>`, under `<objective>/` for an objective other than DiffusionNFT."""
    name = f"{model}_{family}_{reward}"
    return f"{objective}/{name}" if objective else name


def run_name(model: str, family: str, reward: str, objective: str | None = None) -> str:
    """The preset's run name (runs/<name>/, the MLflow run): its file's stem, prefixed by another objective's name so
    that the objectives' runs of one model, family and reward do not share a run directory."""
    name = f"{model}_{family}_{reward}"
    return f"{objective}_{name}" if objective else name


def _combinations():
    return [(m, f, r, o) for o in (None, *PRESET_OBJECTIVES) for m in MODELS for f in FAMILIES for r in REWARDS]


def preset_models() -> dict[str, str]:
    """Preset name -> its model (the backbone key: several models may share a `model.kind`, as sd35l and sd35m)."""
    return {preset_name(m, f, r, o): m for m, f, r, o in _combinations()}


def objective_part(model: str, objective: str) -> Path | None:
    """parts/objectives/<objective>/<model>.yaml, the objective's values for that model, where a peer has them."""
    path = OBJECTIVES_DIR / objective / f"{model}.yaml"
    return path if path.is_file() else None


def preset_header(model: str, family: str, reward: str, objective: str | None = None) -> str:
    """The comment lines heading one preset: what it is and what its settings are (its backbone spec's `settings`:
    official, or where a model has no official setting, what they are instead; for another objective, where its
    values come from), wrapped to 120 columns."""
    what = f"{TITLES[model]}, {family}, trained on {TITLES[reward]}: {MODEL_SPECS[model].settings}."
    if objective:
        own = objective_part(model, objective)
        source = (f"configs/parts/objectives/{objective}/{model}.yaml" if own else
                  f"configs/parts/objectives/{objective}.yaml")
        default = objective_class(ObjectiveConfig.model_fields["name"].default).title
        what += (f" Objective {objective_class(objective).title} instead of {default}, its values from "
                 f"{source} (each names its source).")
    lines = textwrap.wrap(what, HEADER_WIDTH - 2, break_on_hyphens=False, break_long_words=False)
    return "".join(f"# {line}\n" for line in lines)


def preset_text(model: str, family: str, reward: str, objective: str | None = None) -> str:
    """The YAML of one preset: a header and one `extends:` list of the parts."""
    up = "../../parts" if objective else "../parts"
    parts = [f"{up}/official.yaml", f"{up}/models/{model}.yaml", f"{up}/families/{family}.yaml",
             f"{up}/rewards/{reward}.yaml"]
    if objective:
        parts.append(f"{up}/objectives/{objective}.yaml")
        if objective_part(model, objective):
            parts.append(f"{up}/objectives/{objective}/{model}.yaml")
    return (
        preset_header(model, family, reward, objective)
        + "# Generated from configs/parts/ by `python -m solrl_core.config.presets`; edit the parts, not this file.\n"
        f"extends: [{', '.join(parts)}]\n"
        + (f"name: {run_name(model, family, reward, objective)}\n" if objective else "")
    )


def expected_presets() -> dict[str, str]:
    """Path under configs/presets/ -> content of every preset."""
    return {f"{preset_name(m, f, r, o)}.yaml": preset_text(m, f, r, o) for m, f, r, o in _combinations()}


def _present(directory: Path) -> dict[str, Path]:
    return {p.relative_to(directory).as_posix(): p for p in directory.rglob("*.yaml")} if directory.is_dir() else {}


def write_presets(directory: Path = PRESETS_DIR) -> list[Path]:
    """Write every preset into `directory`, remove stale `*.yaml` there; return the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    expected = expected_presets()
    for name, stale in _present(directory).items():
        if name not in expected:
            stale.unlink()
    written = []
    for name, text in expected.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
        written.append(path)
    return written


def differences(directory: Path = PRESETS_DIR) -> list[str]:
    """Names of presets that are missing, differ from the generator's output, or should not be there."""
    expected = expected_presets()
    present = {name: path.read_text() for name, path in _present(directory).items()}
    return sorted(n for n in set(expected) | set(present) if expected.get(n) != present.get(n))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solrl_core.config.presets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a preset is out of date")
    parser.add_argument("--dir", type=Path, default=PRESETS_DIR, help="presets directory (default configs/presets)")
    args = parser.parse_args(argv)
    if args.check:
        diff = differences(args.dir)
        print(f"{len(diff)} preset(s) out of date: {', '.join(diff)}" if diff else "presets are up to date")
        return 1 if diff else 0
    written = write_presets(args.dir)
    print(f"wrote {len(written)} presets into {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
