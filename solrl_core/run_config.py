"""Creating and re-opening a run: the config is frozen in the run directory at the first start, and replaced only
while the run has computed nothing (no stage, no initial adapters, no evaluation: it failed at once)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import yaml

from solrl_core.run import commit
from solrl_core.config.schema import RunConfig, dump_config, load_yaml
from solrl_core.config.loading import validate_config
from solrl_core.errors import DamagedArtifactError, SolrlError
from solrl_core.run.integrity import CONFIG_MARK, config_body, config_text, read_record
from solrl_core.run.rundir import RunDir
from solrl_core.run.storage import check_remote_access, remove_tree, write_text_atomic
from solrl_core.wording import plural

# Keys that may differ when a run is continued (extending a run is the point of passing them again; where stages
# run, and whether scoring overlaps sampling, do not change what they compute).
_RESUMABLE_KEYS = ("iterations", "orchestration", "score")


def _comparable(cfg: RunConfig) -> dict:
    from solrl_core.redaction import redact_tree

    data = redact_tree(cfg.model_dump(mode="json"))  # as frozen: a URL's credentials are not part of the config
    for key in _RESUMABLE_KEYS:
        data.pop(key, None)
    return data


FINGERPRINT_FILE = "config.fingerprint.json"  # the frozen config's digest, kept beside it: see `prepare_run`


def config_fingerprint(cfg: RunConfig) -> str:
    """The digest of what a run's artifacts depend on in `cfg` (all but the keys a resume may change)."""
    text = json.dumps(_comparable(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _check_fingerprint(run: RunDir, cfg: RunConfig) -> None:
    """A run whose config.yaml is gone (deleted after it was damaged, as its error says) resumes only with the config
    it was started with: its fingerprint, written beside it, must match `cfg`'s once anything is computed (artifacts
    of another config fail later, deep in a stage: an adapter of another shape)."""
    path = run.root / FINGERPRINT_FILE
    done = computed(run)
    if done is None or not path.is_file():  # nothing to protect, or a run frozen before fingerprints
        return
    recorded = read_record(path, str(path), f"delete {path} if {run.root} was started with this config").get("blake2b")
    if recorded != config_fingerprint(cfg):
        raise SolrlError(f"{run.root} has no config.yaml and was started with a different config (its fingerprint in "
                         f"{path} differs) and has computed {done}; resume with the config it was started with, or "
                         "use another --run-dir")


def prepare_run(run: RunDir, cfg: RunConfig) -> RunConfig:
    """Freeze `cfg` into a new run directory, or check it matches the one an existing run was started with. A run
    that has computed nothing yet (`computed`) takes `cfg` instead of its frozen config, saying so in one line on
    stderr: its unfinished attempts and its MLflow run record (run.json) are dropped, as they belong to the old one.
    The frozen config's fingerprint (FINGERPRINT_FILE) lets a run whose config.yaml was deleted refuse another one."""
    if not run.config_path.is_file():
        _check_fingerprint(run, cfg)
    if run.config_path.is_file():
        try:
            frozen = _comparable(load_run_config(run))
        except SolrlError:  # damaged, or no longer valid (a value past a bound): replaceable until something computed
            if computed(run) is not None:
                raise
            frozen = None
        if frozen != _comparable(cfg):
            how = ("its frozen config did not load" if frozen is None else
                   f"differs at: {', '.join(sorted(_diff_keys(frozen, _comparable(cfg)))[:5])}")
            done = computed(run)
            if done is not None:
                raise SolrlError(f"{run.root} was started with a different config ({how}) and has computed {done}; "
                                 "use the same config to resume, or another --run-dir")
            _discard_attempts(run)
            print(f"solrl: replaced the config of {run.root}, which had computed nothing ({how})", file=sys.stderr)
    run.root.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run.root / FINGERPRINT_FILE, json.dumps({"blake2b": config_fingerprint(cfg)}) + "\n")
    write_text_atomic(run.config_path, config_text(dump_config(cfg)))
    return cfg


def computed(run: RunDir) -> str | None:
    """What the run has computed, in words ("explore of iteration 0", "the initial adapters", ...); None when nothing:
    no stage manifest (nor a stage's commit under way), no initial adapters, no evaluation."""
    for manifest in sorted(run.root.glob("iter_[0-9]*/manifests/*.json")):
        name, iteration = manifest.name.removesuffix(".json"), manifest.parent.parent.name[5:]
        if not name.endswith(".pending") or commit.pending(manifest) is not None:
            return f"{name.removesuffix('.pending')} of iteration {int(iteration)}"
    if (run.init_dir / "state.json").is_file():
        return "the initial adapters"
    if any(run.root.glob("eval/step_[0-9]*/metrics.json")) or any(
            commit.pending(journal) is not None for journal in run.root.glob("eval/step_[0-9]*.pending.json")):
        return "an evaluation"
    return None


def config_replaced(run: RunDir, cfg: RunConfig) -> bool:
    """Whether `prepare_run(run, cfg)` will replace the run's frozen config (it differs from `cfg`, or no longer loads,
    and the run has computed nothing), dropping its MLflow run record (run.json) with it."""
    if not run.config_path.is_file() or computed(run) is not None:
        return False
    try:
        return _comparable(load_run_config(run)) != _comparable(cfg)
    except SolrlError:
        return True


def _discard_attempts(run: RunDir) -> None:
    """Remove what attempts under the old config left unfinished (partial artifacts; nothing is complete), and the
    record of its MLflow run: both were made for the config being replaced."""
    for leftover in [*run.root.glob("iter_[0-9]*"), run.init_dir, run.init_dir.with_name("init.partial"),
                     run.root / "eval"]:
        remove_tree(leftover)
    run.run_json.unlink(missing_ok=True)


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
    """The run's frozen config; a SolrlError in one line when it is not a run directory, its object store refuses
    (no credentials), or the config is damaged."""
    check_remote_access(run.root)
    if not run.config_path.is_file():
        raise SolrlError(f"{run.root} is not a run directory (no config.yaml); start one with: solrl train CONFIG")
    path = run.config_path
    remedy = (f"the run cannot be resumed from it: with the config it was started with, delete {path} and run "
              f"solrl train THAT_CONFIG --run-dir {run.root} (another config would not match the finished stages); "
              "otherwise start a new --run-dir")
    try:
        text = path.read_text()
        data = load_yaml(config_body(text, str(path), remedy), str(path))
    except UnicodeDecodeError:
        raise DamagedArtifactError(f"{path} is damaged (not UTF-8 text); {remedy}") from None
    except yaml.YAMLError:
        raise DamagedArtifactError(f"{path} is damaged (not valid YAML); {remedy}") from None
    try:
        return validate_config(data, source=str(path))
    except SolrlError as exc:
        if text.startswith(CONFIG_MARK):  # solrl froze it: a damaged or outdated run config, said as such
            raise
        # no digest line, and not a config solrl can read: someone else's config.yaml, not a run directory
        raise SolrlError(f"{run.root} is not a run directory of solrl: its config.yaml has no digest line (solrl did "
                         f"not freeze it) and is not a solrl config ({exc}); give the --run-dir of a solrl run") from None


def default_run_dir(cfg: RunConfig, name: str | None = None) -> Path:
    """Where a run's artifacts go when no --run-dir is given: runs/<name>/ (`solrl deploy --name`), else
    runs/<config name>/."""
    return Path("runs") / (name or cfg.name)
