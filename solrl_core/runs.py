"""Creating and re-opening a run: the config is frozen in the run directory at the first start."""

from __future__ import annotations

from pathlib import Path

import yaml

from solrl_core.config import RunConfig, dump_config, load_yaml, validate_config
from solrl_core.errors import DamagedArtifactError, SolrlError
from solrl_core.integrity import config_body, config_text
from solrl_core.rundir import RunDir
from solrl_core.storage import write_text_atomic
from solrl_core.wording import plural

# Keys that may differ when a run is continued (extending a run is the point of passing them again; where stages
# run, and whether scoring overlaps sampling, do not change what they compute).
_RESUMABLE_KEYS = ("iterations", "orchestration", "score")


def _comparable(cfg: RunConfig) -> dict:
    data = cfg.model_dump(mode="json")
    for key in _RESUMABLE_KEYS:
        data.pop(key, None)
    return data


def prepare_run(run: RunDir, cfg: RunConfig) -> RunConfig:
    """Freeze `cfg` into a new run directory, or check it matches the one an existing run was started with."""
    if run.config_path.is_file():
        frozen = load_run_config(run)
        if _comparable(frozen) != _comparable(cfg):
            diff = sorted(_diff_keys(_comparable(frozen), _comparable(cfg)))
            raise SolrlError(
                f"{run.root} was started with a different config (differs at: {', '.join(diff[:5])}); "
                "use the same config to resume, or another --run-dir"
            )
    run.root.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run.config_path, config_text(dump_config(cfg)))
    return cfg


def _diff_keys(a: dict, b: dict, prefix: str = "") -> set[str]:
    out = set()
    for key in set(a) | set(b):
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            out |= _diff_keys(va, vb, f"{prefix}{key}.")
        elif va != vb:
            out.add(prefix + key)
    return out


def check_iteration(cfg: RunConfig, iteration: int, flag: str = "--iteration") -> None:
    """A SolrlError giving the valid range unless `iteration` is one of the run's: 0 to iterations - 1."""
    if not 0 <= iteration < cfg.iterations:
        raise SolrlError(f"{flag} {iteration} is out of range: the run has {plural(cfg.iterations, 'iteration')}, "
                         f"numbered 0 to {cfg.iterations - 1} (more with: solrl train CONFIG --iterations N)")


def check_step(cfg: RunConfig, step: int, flag: str = "--step") -> None:
    """A SolrlError giving the valid range unless `step` (iterations done) is 0 to the run's iterations."""
    if not 0 <= step <= cfg.iterations:
        raise SolrlError(f"{flag} {step} is out of range: iterations done, 0 (before training) to {cfg.iterations}")


def load_run_config(run: RunDir) -> RunConfig:
    if not run.config_path.is_file():
        raise SolrlError(f"{run.root} is not a run directory (no config.yaml); start one with: solrl train CONFIG")
    path = run.config_path
    remedy = (f"the run cannot be resumed from it: with the config it was started with, delete {path} and run "
              f"solrl train THAT_CONFIG --run-dir {run.root} (another config would not match the finished stages); "
              "otherwise start a new --run-dir")
    try:
        data = load_yaml(config_body(path.read_text(), str(path), remedy))
    except UnicodeDecodeError:
        raise DamagedArtifactError(f"{path} is damaged (not UTF-8 text); {remedy}") from None
    except yaml.YAMLError:
        raise DamagedArtifactError(f"{path} is damaged (not valid YAML); {remedy}") from None
    return validate_config(data, source=str(path))


def default_run_dir(cfg: RunConfig) -> Path:
    """Where a run's artifacts go when no --run-dir is given: runs/<config name>/."""
    return Path("runs") / cfg.name
