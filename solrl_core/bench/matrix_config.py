"""The learning matrix's config (configs/learning_matrix.yaml): which cells to train (world × objective × family),
for how long, over how many training seeds, with which testbed settings per objective. Same strictness as the run
config: unknown keys are refused with the key named.

A cell's run config is built in layers, later ones winning: the world's `base` run config (model, prompts, reward,
evaluation), the family config's own keys (configs/families/<family>.yaml without the config it extends: N, K,
precisions, steps, regenerate), the world's `overrides`, the objective's `objectives.<name>` keys (`objective.name`
and the testbed's settings of it), then the matrix's own keys (iterations, seed, eval.every, tracking, name).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from solrl_core.bench.bench_config import BenchTrackingConfig, _format, _nested, read_protocol
from solrl_core.config.limits import MAX_ITERATIONS, MAX_SEEDS
from solrl_core.config.loading import validate_config
from solrl_core.config.sources import read_config, resolve_config
from solrl_core.config.schema import RunConfig, _count, _deep_merge, _Strict, load_yaml
from solrl_core.errors import ConfigError
from solrl_core.excerpts import cut
from solrl_core.userfiles import read_text

RESERVED = {"iterations", "seed", "eval.every", "tracking.uri", "tracking.experiment", "name", "objective.name"}


class MatrixWorld(_Strict):
    """One world of the testbed: a run config every cell of it starts from, and the cells it trains."""

    base: str = Field(description="the world's run config (a file relative to the matrix config, or a packaged "
                      "name): model, prompts, reward, evaluation")
    objectives: list[str] = Field(description="objectives trained in this world (each a key of `objectives`)")
    families: list[str] = Field(description="family configs (paths relative to the matrix config), e.g. "
                                "families/sol_rl.yaml: their own keys are set over `base`")
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted run-config keys of every cell of "
                                      "this world (e.g. prompts.per_iteration: 4)")
    iterations: int | None = _count(None, 1, MAX_ITERATIONS, "iterations of this world's cells; null = the "
                                    "matrix's")
    eval_every: int | None = _count(None, 1, MAX_ITERATIONS, "held-out evaluation period of this world's cells; "
                                    "null = the matrix's")


class MatrixConfig(_Strict):
    name: str = "learning-matrix"
    seeds: int = _count(3, 1, MAX_SEEDS, "training seeds per cell (run seeds 0..seeds-1)")
    iterations: int = _count(24, 1, MAX_ITERATIONS, "iterations of every cell (a world may set its own)")
    eval_every: int = _count(8, 1, MAX_ITERATIONS, "held-out evaluation after every N iterations, before training "
                             "and after the last")
    worlds: dict[str, MatrixWorld] = Field(description="world name -> its base config and cells")
    objectives: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="objective name -> the dotted run-config keys its cells set (the "
        "testbed's settings of it, each with its reason); an objective without an entry runs its defaults")
    run_root: str = Field("runs/learning-matrix", description="where <world>/<objective>/<family>-s<seed>/ and the "
                          "report go")
    quick: dict[str, Any] = Field(default_factory=dict, description="keys replaced under --quick")
    protocol: Literal["full", "quick"] = Field("full", description="set by the loader: 'quick' under --quick")
    tracking: BenchTrackingConfig = BenchTrackingConfig(experiment="solrl-learning-matrix")

    @model_validator(mode="after")
    def _check(self) -> MatrixConfig:
        if not self.worlds:
            raise ValueError("worlds: name at least one world")
        for world, spec in self.worlds.items():
            if not spec.objectives or not spec.families:
                raise ValueError(f"worlds.{cut(world)}: name at least one objective and one family")
            clash = sorted(RESERVED & set(spec.overrides))
            if clash:
                raise ValueError(f"worlds.{cut(world)}.overrides: '{clash[0]}' is set by the matrix itself")
        for objective, keys in self.objectives.items():
            clash = sorted((RESERVED - {"objective.name"}) & set(keys))
            if clash:
                raise ValueError(f"objectives.{cut(objective)}: '{clash[0]}' is set by the matrix itself")
        return self


@dataclass(frozen=True)
class MatrixRun:
    """One training run of the matrix: a cell (world, objective, family) at one run seed."""

    world: str
    objective: str
    label: str  # the family config's name (e.g. sol_rl)
    seed: int
    cfg: RunConfig
    run_dir: Path

    @property
    def cell(self) -> str:
        return f"{self.world}/{self.objective}/{self.label}"

    @property
    def key(self) -> str:
        return f"{self.cell}-s{self.seed}"


def load_matrix_config(path: str | Path, overrides: list[str] | None = None,
                       quick: bool = False) -> tuple[MatrixConfig, Path]:
    """Read and validate a learning-matrix YAML (a file or a packaged name; `--set` overrides); returns it with its
    directory. `quick`: its `quick` keys replace the protocol's, labelled protocol 'quick'."""
    data, path = read_protocol(path, overrides, quick, "matrix")
    try:
        return MatrixConfig.model_validate(data), path.resolve().parent
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_format(exc)}") from None


def family_keys(path: Path) -> dict:
    """A family config's own keys: its file without `extends` and `name` (the world gives the rest)."""
    if not path.is_file():
        raise ConfigError(f"family config not found: {path}")
    data = load_yaml(read_text(path, "config"), str(path)) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    return {k: v for k, v in data.items() if k not in ("extends", "name")}


def _resolve(base_dir: Path, name: str) -> Path:
    local = base_dir / name
    return local if local.is_file() else resolve_config(name)


def cell_config(matrix: MatrixConfig, base_dir: Path, world: str, objective: str, family: Path,
                seed: int) -> RunConfig:
    """The run config of one cell at one run seed (module docstring: its layers)."""
    spec = matrix.worlds[world]
    own = {
        "name": f"{world}-{objective}-{family.stem}",
        "iterations": spec.iterations or matrix.iterations,
        "seed": seed,
        "eval": {"every": spec.eval_every or matrix.eval_every},
        "objective": {"name": objective},
        "tracking": {"experiment": matrix.tracking.experiment,
                     **({"uri": matrix.tracking.uri} if matrix.tracking.uri else {})},
    }
    data = read_config(_resolve(base_dir, spec.base))
    for layer in (family_keys(family), _nested(spec.overrides), _nested(matrix.objectives.get(objective, {})), own):
        data = _deep_merge(data, layer)
    return validate_config(data, source=f"{world}/{objective}/{family.stem}")


def matrix_runs(matrix: MatrixConfig, base_dir: Path, run_root: str | Path | None = None) -> list[MatrixRun]:
    """Every cell at every run seed, seed-major (every cell of seed 0 first, so a matrix cut short still covers every
    cell), with its resolved run config, under <run_root>/<world>/<objective>/<family>-s<seed>/."""
    root = Path(run_root or matrix.run_root)
    runs = []
    for seed in range(matrix.seeds):
        for world, spec in matrix.worlds.items():
            families = [Path(f) if Path(f).is_absolute() else base_dir / f for f in spec.families]
            for objective in spec.objectives:
                for family in families:
                    cfg = cell_config(matrix, base_dir, world, objective, family, seed)
                    runs.append(MatrixRun(world, objective, family.stem, seed, cfg,
                                          root / world / objective / f"{family.stem}-s{seed}"))
    return runs
