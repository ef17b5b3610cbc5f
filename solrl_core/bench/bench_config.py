"""The benchmark's own config (configs/bench.yaml): which family configs to train, how long, how many seeds, and
how to price an iteration on a GPU. Same strictness as the run config: unknown keys are rejected with the key named.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from solrl_core.config.schema import (MAX_ITERATIONS, MAX_NODES, MAX_SEEDS, RunConfig, _count, _deep_merge,
                                      format_validation_error, _real, _Strict, apply_overrides)
from solrl_core.config.loading import validate_config
from solrl_core.config.sources import read_config, resolve_config
from solrl_core.errors import ConfigError


class BenchCostConfig(_Strict):
    """The modeled-GPU-cost axis: each family's per-iteration shapes priced with the cost planner."""

    model: str = Field("sd35l", description="'embedded' (FLOPs of the embedded model itself) or a planner model "
                       "(flux1, sd35l, sd35m, sana): the same shapes priced on that backbone")
    gpu: str = Field("b200", description="a GPU of the planner's table (solrl plan --help)")
    gpus: int = _count(1, 1, MAX_NODES, "GPUs per iteration (costs are reported in GPU-seconds either way)")
    utilisation: float | None = _real(None, "share of the GPU's peak throughput the costs assume; null = the "
                                      "planner's stated default", gt=0, le=1)
    compare: list[str] = Field(default_factory=list, description="more models to price the same iterations on "
                               "(a table beside the main axis), e.g. [embedded, flux1, sana]")


class BenchTrackingConfig(_Strict):
    uri: str | None = Field(None, description="MLflow tracking URI; null = sqlite:///mlruns.db in the working dir")
    experiment: str = "solrl-bench"


class BenchConfig(_Strict):
    name: str = "bench"
    families: list[str] = Field(description="family configs (paths relative to this file), e.g. families/sol_rl.yaml")
    baseline: str = Field("baseline", description="family whose final eval reward is the time-to-target target")
    ratio_to: list[str] = Field(default_factory=lambda: ["baseline", "naive_scaling"],
                                description="families the cost-to-target ratios are reported against")
    iterations: int = _count(..., 1, MAX_ITERATIONS, "RL iterations each family trains")
    seeds: int = _count(1, 1, MAX_SEEDS, "run seeds 0..seeds-1 (each family trains once per seed)")
    eval_every: int = _count(..., 1, MAX_ITERATIONS, "held-out evaluation after every N iterations (and the last)")
    audit_every: int = _count(0, 0, MAX_ITERATIONS, "full-fidelity audit every N iterations of the audited families "
                              "(see audit_families); 0 = never")
    audit_families: list[str] | None = Field(None, description="families audited (names); null = every family whose "
                                             "explore differs from the regenerate copy")
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted run-config keys set in every family "
                                      "(e.g. prompts.per_iteration: 4), so all share the same shapes")
    run_root: str = Field("runs/bench", description="where runs/<family>-s<seed>/ and the report go")
    margin: float = _real(0.01, "the relative non-inferiority margin of 'sol_rl ends no more than this below "
                          "naive_scaling' (the paper: within ~1%): holds when the CI of their paired difference lies "
                          "above - this x naive_scaling's final value", ge=0)
    target_gain: float = _real(0.03, "the pre-registered target of time to target: the baseline's held-out value "
                               "before training plus this (fixed before the runs: a baseline that does not rise "
                               "leaves its seeds censored, never the claim untestable)", gt=0)
    quick: dict[str, Any] = Field(default_factory=dict, description="bench keys replaced under `solrl bench "
                                  "--quick` (a smaller protocol, e.g. {seeds: 3, iterations: 6})")
    protocol: Literal["full", "quick"] = Field("full", description="set by the loader: 'quick' under --quick")
    cost: BenchCostConfig = BenchCostConfig()
    tracking: BenchTrackingConfig = BenchTrackingConfig()

    @model_validator(mode="after")
    def _check(self) -> BenchConfig:
        if not self.families:
            raise ValueError("families: name at least one family config")
        reserved = {"iterations", "seed", "eval.every", "audit.every", "tracking.uri", "tracking.experiment"}
        clash = sorted(reserved & set(self.overrides))
        if clash:
            raise ValueError(f"overrides: '{clash[0]}' is set by the benchmark itself (use its own key)")
        return self


@dataclass(frozen=True)
class BenchRun:
    """One training run of the benchmark: a family config at one run seed."""

    label: str  # the family config's name (e.g. sol_rl)
    seed: int
    cfg: RunConfig
    run_dir: Path

    @property
    def key(self) -> str:
        return f"{self.label}-s{self.seed}"


def _format(exc: ValidationError) -> str:
    err = exc.errors()[0]
    if err["type"] == "missing":
        return f"missing key '{'.'.join(str(p) for p in err['loc'])}'"
    return format_validation_error(exc)


def check_cost_names(bench: BenchConfig) -> None:
    """Fail before any training on a GPU or model the planner does not know (the report would fail at the end)."""
    from solrl_core.planner.flops import get_model
    from solrl_core.planner.gpus import get_gpu

    get_gpu(bench.cost.gpu)
    for name in [bench.cost.model, *bench.cost.compare]:
        if name != "embedded":
            get_model(name)


def read_protocol(path: str | Path, overrides: list[str] | None, quick: bool, what: str) -> tuple[dict, Path]:
    """The YAML of a protocol config (a bench or a learning matrix: a file or a packaged name, with `extends`), its
    `quick` keys replacing the protocol's under `quick` (labelled protocol 'quick'), then the `--set` overrides;
    with the file's path. `what` names the config's kind in errors."""
    path = resolve_config(path)
    data = read_config(path)
    data.setdefault("name", path.stem)
    if quick:
        smaller = data.get("quick") or {}
        if not isinstance(smaller, dict) or not smaller:
            raise ConfigError(f"{path}: --quick needs a 'quick' section ({what} keys of the smaller protocol)")
        if "quick" in smaller or "protocol" in smaller:
            raise ConfigError(f"{path}: quick: set {what} keys such as seeds or iterations, not quick/protocol")
        data = _deep_merge(data, {**smaller, "protocol": "quick"})
    data = apply_overrides(data, overrides or [])
    if data.get("protocol", "full") != ("quick" if quick else "full"):
        raise ConfigError(f"{path}: protocol is set by --quick, not in the file or by --set")
    return data, path


def load_bench_config(path: str | Path, overrides: list[str] | None = None,
                      quick: bool = False) -> tuple[BenchConfig, Path]:
    """Read and validate a bench YAML (a file, or a packaged bench config's name; with `extends` and `--set`
    overrides); returns it with its directory. `quick`: the config's `quick` keys replace the protocol's (before the
    overrides), labelled protocol 'quick'."""
    data, path = read_protocol(path, overrides, quick, "bench")
    try:
        return BenchConfig.model_validate(data), path.resolve().parent
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_format(exc)}") from None


def low_precision_explore(cfg: RunConfig) -> bool:
    """Whether the explore differs from full-precision sampling (so an audit measures something): a precision
    other than fp32, or fewer/more steps than the regenerate copy that then replaces the samples."""
    if cfg.explore.precision != "fp32":
        return True
    return cfg.regenerate.enabled and cfg.explore.steps != cfg.regenerate.steps


def _nested(dotted: dict[str, Any]) -> dict:
    out: dict = {}
    for key, value in dotted.items():
        node = out
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"overrides: '{key}' conflicts with another override")
        node[last] = value
    return out


def family_config(path: Path, bench: BenchConfig, seed: int) -> RunConfig:
    """The run config of one family at one run seed: the family file, the benchmark's shared overrides, then the
    benchmark's own keys (iterations, seed, eval.every, audit.every, tracking)."""
    own = {
        "iterations": bench.iterations,
        "seed": seed,
        "eval": {"every": bench.eval_every},
        "tracking": {"experiment": bench.tracking.experiment,
                     **({"uri": bench.tracking.uri} if bench.tracking.uri else {})},
    }
    data = _deep_merge(_deep_merge(read_config(path), _nested(bench.overrides)), own)
    data.setdefault("name", path.stem)
    cfg = validate_config(data, source=str(path))
    audited = low_precision_explore(cfg) if bench.audit_families is None else cfg.name in bench.audit_families
    cfg.audit.every = bench.audit_every if audited else 0
    return cfg


def bench_runs(bench: BenchConfig, base_dir: Path, run_root: str | Path | None = None) -> list[BenchRun]:
    """Every (family, seed) run, seed-major (all families of seed 0 first), with its resolved run config.

    Family config paths are relative to `base_dir` (the bench file's directory); run directories go under
    `run_root` (default: the config's `run_root`, relative to the working directory)."""
    check_cost_names(bench)
    root = Path(run_root or bench.run_root)
    paths = [Path(rel) if Path(rel).is_absolute() else base_dir / rel for rel in bench.families]
    labels: list[str] = []
    runs = []
    for seed in range(bench.seeds):
        for path in paths:
            cfg = family_config(path, bench, seed)
            if seed == 0:
                if cfg.name in labels:
                    raise ConfigError(f"families: two configs are named '{cfg.name}' (give each a distinct name)")
                labels.append(cfg.name)
            runs.append(BenchRun(cfg.name, seed, cfg, root / f"{cfg.name}-s{seed}"))
    unknown = [name for name in bench.audit_families or [] if name not in labels]
    if unknown:
        raise ConfigError(
            f"audit_families: '{unknown[0]}' is not one of the benchmark's families ({', '.join(labels)})"
        )
    if bench.baseline not in labels:
        raise ConfigError(f"baseline: '{bench.baseline}' is not one of the benchmark's families ({', '.join(labels)})")
    return runs
