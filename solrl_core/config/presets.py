"""The official presets: configs/presets/<model>_<family>_<reward>.yaml, one per model × family × reward.

Each preset is a short generated file whose one key, `extends`, lists the shared parts in configs/parts/
(official.yaml, then one file each of models/, families/ and rewards/; later files win), so a value lives in exactly
one place. The models are the backbone specs with a part in parts/models/, the rewards the registered rewards with a
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
from solrl_core.config.packaged import CONFIGS_DIR, PRESETS_SUBDIR
from solrl_core.rewards.registry import REWARDS as REGISTERED_REWARDS

PRESETS_DIR = CONFIGS_DIR / PRESETS_SUBDIR
HEADER_WIDTH = 120  # the header's comment lines are wrapped to this

MODEL_SPECS = {s.key: s for s in backbone_specs() if s.part.is_file()}  # models with a part in parts/models/
MODELS = tuple(MODEL_SPECS)
# rewards with a part in parts/rewards/, in the reward registry's order
PRESET_REWARDS = {name: cls for name, cls in REGISTERED_REWARDS.items()
                  if (CONFIGS_DIR / "parts" / "rewards" / f"{name}.yaml").is_file()}
REWARDS = tuple(PRESET_REWARDS)

TITLES = {
    **{key: spec.title for key, spec in MODEL_SPECS.items()},
    **{name: cls.title or name for name, cls in PRESET_REWARDS.items()},
}

def preset_name(model: str, family: str, reward: str) -> str:
    return f"{model}_{family}_{reward}"


def preset_models() -> dict[str, str]:
    """Preset name -> its model (the backbone key: several models may share a `model.kind`, as sd35l and sd35m)."""
    return {preset_name(m, f, r): m for m in MODELS for f in FAMILIES for r in REWARDS}


def preset_header(model: str, family: str, reward: str) -> str:
    """The comment lines heading one preset: what it is and what its settings are (its backbone spec's `settings`:
    official, or where a model has no official setting, what they are instead), wrapped to 120 columns."""
    what = f"{TITLES[model]}, {family}, trained on {TITLES[reward]}: {MODEL_SPECS[model].settings}."
    lines = textwrap.wrap(what, HEADER_WIDTH - 2, break_on_hyphens=False, break_long_words=False)
    return "".join(f"# {line}\n" for line in lines)


def preset_text(model: str, family: str, reward: str) -> str:
    """The YAML of one preset: a header and one `extends:` list of the parts."""
    parts = ["../parts/official.yaml", f"../parts/models/{model}.yaml", f"../parts/families/{family}.yaml",
             f"../parts/rewards/{reward}.yaml"]
    return (
        preset_header(model, family, reward)
        + "# Generated from configs/parts/ by `python -m solrl_core.config.presets`; edit the parts, not this file.\n"
        f"extends: [{', '.join(parts)}]\n"
    )


def expected_presets() -> dict[str, str]:
    """File name -> content of every preset."""
    return {
        f"{preset_name(m, f, r)}.yaml": preset_text(m, f, r) for m in MODELS for f in FAMILIES for r in REWARDS
    }


def write_presets(directory: Path = PRESETS_DIR) -> list[Path]:
    """Write every preset into `directory`, remove stale `*.yaml` there; return the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    expected = expected_presets()
    for stale in directory.glob("*.yaml"):
        if stale.name not in expected:
            stale.unlink()
    written = []
    for name, text in expected.items():
        path = directory / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
        written.append(path)
    return written


def differences(directory: Path = PRESETS_DIR) -> list[str]:
    """Names of presets that are missing, differ from the generator's output, or should not be there."""
    expected = expected_presets()
    present = {p.name: p.read_text() for p in directory.glob("*.yaml")} if directory.is_dir() else {}
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
