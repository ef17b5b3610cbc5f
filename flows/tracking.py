"""MLflow: one MLflow run per training run; per-iteration metrics and the best/worst grid (step = iteration), and
each iteration's candidate pool under `pool/iter_NNNN/` (see `log_pool`).

Where: `tracking_uri` picks the store of a new run (recorded in its run.json; later commands use that one), and
`connect` talks to it, through the MLflow server of `make server` when one serves that sqlite file
(solrl_core/mlflow_links.py). MLflow's own "View run / View experiment" lines stay off stdout (QUIET_ENV): the
commands print the run's address themselves, once.

When MLflow goes away: a run whose MLflow run no longer exists (its store deleted or replaced, the run deleted in the
UI) gets a new one in the same store, said in one line, and every iteration, evaluation and audit is logged there
again (each `logged` marker names the MLflow run it was logged to: `ensure_mlflow_run`). Every MLflow request is
bounded (flows/service_checks.py MLFLOW_HTTP_DEFAULTS: timeout and retries); a store or server that fails while logging
ends in one line, `TrackingFailed` (`tracking_errors`), after which the run directory is as complete as its stages
made it and the same command, run again, logs what is missing. Logging reads the run directory's artifacts only
after checking them against their manifests (solrl_core/run/integrity.py)."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import math
import os
import re
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import numpy as np

from solrl_core.config.schema import RunConfig
from solrl_core.errors import SolrlError
from solrl_core.inspect import logged_marker, pool_artifact_path, pool_table, stage_shards
from solrl_core.run.integrity import verify_stage
from solrl_core.mlflow_links import SQLITE, health_failure, is_server, serving_server, sqlite_file
from solrl_core.run.pool import read_table
from solrl_core.grids import frame_count, frame_strip, save_gif
from solrl_core.pool_plots import best_worst_grid, proxy_final_scatter, top_bottom_animations, top_bottom_grids
from solrl_core.credentials import remember, with_credentials
from solrl_core.redaction import redact, redact_tree
from solrl_core.resource_limits import causes, limit_error
from solrl_core.run.rundir import STAGES, RunDir, read_json, write_json_atomic
from solrl_core.run.storage import local_file, location, save_image
from solrl_core.userfiles import closest_existing, format_bytes
from solrl_core.wording import plural

POOL_TILE = 128  # pixels, longer side of each image in the pool's top/bottom grids
THUMBNAIL = 64  # pixels, longest side of the images in the pool table's `thumbnail` column
# The experiment tag by which the MLflow UI (3.x) picks the experiment's view: model training (metric charts),
# not the GenAI view it infers for an experiment without it. MLflow 3.17 ignores it; the links solrl prints ask for
# the training view themselves (solrl_core/mlflow_links.py).
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
# MLflow prints "View run / View experiment" to stdout after every run it ends (a dozen times a training, under
# --quiet too, through the progress bars). An environment variable of the same name wins.
QUIET_ENV = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
# The config keys logged as MLflow params (a key names its subkeys too; unset ones are left out). Few on purpose:
# MLflow's image card (Model metrics: `pool/best_worst`) prints every param of the run above the image, in its
# fixed-height box; the config's 80-odd keys filled it and hid the grid, 11 still hid half of it, these (4, or 5 with
# model.path: two lines) leave it whole. The whole config is the artifact CONFIG_ARTIFACT.
RUN_PARAMS = ("family", "model.kind", "model.path", "iterations", "train.optimizer.lr")
CONFIG_ARTIFACT = "config.yaml"
PROXIED = "mlflow-artifacts:"  # artifact locations that only an MLflow server reaches (its proxied artifacts)
CAUSE_CHARS = 200  # how much of an MLflow error a one-line TrackingFailed quotes
AUDIT_MARKER = "audit_logged.json"  # in iter_NNNN/manifests/: the audit is logged (see `log_audit`)
EVAL_MARKER = "logged.json"  # in eval/step_NNNN/: the evaluation is logged (see `log_evaluation`)


class TrackingFailed(SolrlError):
    """MLflow failed while logging (its store or server stopped answering, its database failed, the run went away):
    the run directory is complete and consistent up to there, and the same command, run again, logs what is missing."""


def tracking_uri(cfg: RunConfig) -> str:
    """The store of a new run of `cfg`: `tracking.uri`, else MLFLOW_TRACKING_URI (MLflow's variable, which `make
    server` prints), else sqlite ./mlruns.db of the working directory."""
    uri = cfg.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlruns.db'}"
    return with_credentials(remember(uri))  # a frozen config's tracking.uri is redacted: its credentials come back


@functools.cache
def route(uri: str) -> str:
    """The URI to talk to for store `uri`: the MLflow server that serves it (`make server`'s, while it answers),
    else `uri` itself. Asked once per process."""
    return serving_server(uri) or uri


def store_location(uri: str) -> str:
    """`uri` as run.json records it: a sqlite file given by a relative path made absolute (against the working
    directory), so that the run's store does not change with the folder a later command runs from."""
    if uri.startswith(SQLITE) and not uri[len(SQLITE):].startswith("/") and sqlite_file(uri) is not None:
        return f"{SQLITE}{sqlite_file(uri)}"
    return uri


def connect(uri: str):
    """The `mlflow` module, pointed at store `uri` (through its server, see `route`), its URL lines off stdout, and
    its HTTP retries' warnings off the terminal unless MLflow's INFO lines are wanted (--verbose): a server that stops
    answering is said once, in the command's one-line error. (Its HTTP requests are bounded by the preflight that runs
    before any work: flows/service_checks.py MLFLOW_HTTP_DEFAULTS.)"""
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    if os.environ.get("MLFLOW_LOGGING_LEVEL", "").upper() not in ("DEBUG", "INFO"):
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    import mlflow

    user_setting = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(with_credentials(route(uri)))  # run.json records the store redacted
    # MLflow also exports the URI as MLFLOW_TRACKING_URI, for its subprocesses: the user's variable is put back, or a
    # later new run of this process (a sweep, a matrix) would land in this store rather than where `tracking_uri` says
    # (and the credentials would reach every child's environment)
    if user_setting is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = user_setting
    if route(uri) not in _opened:
        with store_lock(uri):  # a new sqlite store: one process creates its schema, the others wait and find it
            mlflow.MlflowClient().search_experiments(max_results=1)
        _opened.add(route(uri))
    return mlflow


_opened: set[str] = set()  # stores this process has opened (their schema made or found)


@contextlib.contextmanager
def store_lock(uri: str):
    """Hold an OS file lock beside the sqlite file MLflow reaches for `uri` without a server (`<file>.lock`) for the
    block: runs started together on a new store (a sweep from a fresh checkout) create its schema and experiment one
    after another, where MLflow's own schema migrations, run at once, fail. Nothing to hold for a server or another
    store (they serialize themselves)."""
    import fcntl

    path = sqlite_file(route(uri))
    try:
        fh = None if path is None else open(f"{path}.lock", "a")
    except OSError:  # its folder cannot be written: MLflow's own error about the store says it better
        fh = None
    if fh is None:
        yield
        return
    with fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        yield


def proxied_artifacts(uri: str, experiment: str | None = None, run_id: str | None = None) -> str | None:
    """The artifact location of MLflow run `run_id` (else of experiment `experiment`) in store `uri` when it is one
    only an MLflow server reaches (`mlflow-artifacts:`) and `uri` is reached without one; else None. Read from a
    sqlite store's tables directly (no MLflow import, milliseconds); other stores are left to MLflow."""
    database = sqlite_file(route(uri))
    if database is None or not database.is_file():
        return None
    sql, key = (("SELECT artifact_uri FROM runs WHERE run_uuid = ?", run_id) if run_id else
                ("SELECT artifact_location FROM experiments WHERE name = ?", experiment))
    try:
        with contextlib.closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=10)) as db:
            row = db.execute(sql, (key,)).fetchone()
    except sqlite3.Error:  # not (yet) an MLflow database, or locked for long: MLflow reports what it finds
        return None
    location = row[0] if row else None
    return location if isinstance(location, str) and location.startswith(PROXIED) else None


def check_artifact_route(uri: str, experiment: str | None = None, run_id: str | None = None) -> None:
    """One line when the MLflow run `run_id` (a resumed run) or the experiment a new run joins keeps its artifacts
    on an MLflow server that store `uri` is not reached through (MLflow would fail at the first artifact, after an
    iteration of work): a server made it in that same store (`make server` serves ./mlruns.db) and no longer runs."""
    location = proxied_artifacts(uri, experiment, run_id)
    if location is None:
        return
    database = sqlite_file(uri)
    start = f"start an MLflow server on it (`make server` in {database.parent})" if database.name == "mlruns.db" \
        else f"start an MLflow server on it (`make server MLFLOW_STORE={uri}`)"
    what, fix = (f"MLflow run {run_id}", start) if run_id else (
        f"experiment '{experiment}'", f"{start}, set tracking.uri or MLFLOW_TRACKING_URI to a server on it, or log "
        "to another experiment: --set tracking.experiment=NAME")
    raise SolrlError(f"{what} in {uri} keeps its artifacts on an MLflow server ({location}), and no server serves "
                     f"that store now: {fix}")


def run_params(cfg: RunConfig) -> dict[str, str]:
    """The MLflow params of a run of `cfg` (RUN_PARAMS)."""
    return {key: value for key, value in _flatten(redact_tree(cfg.model_dump(mode="json"))).items()
            if value != "None" and any(key == name or key.startswith(name + ".") for name in RUN_PARAMS)}


def _flatten(data: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = str(value)[:500]
    return out


def _experiment_id(name: str, uri: str) -> str:
    """The id of experiment `name` in store `uri` (connected), created if missing (artifacts beside a sqlite store
    reached without a server go to ./mlartifacts; a server keeps them where it keeps its artifacts), tagged with
    EXPERIMENT_KIND if it is not yet."""
    with store_lock(uri):  # two runs started together on a new experiment: one makes it, the other finds it
        return _get_or_create_experiment(name, uri)


def _get_or_create_experiment(name: str, uri: str) -> str:
    import mlflow

    experiment = mlflow.get_experiment_by_name(name)
    if experiment is not None and experiment.lifecycle_stage == "deleted":
        raise SolrlError(f"experiment '{name}' in {uri} is deleted (in the MLflow UI or CLI), so no run can be made "
                         f"in it: restore it (MLFLOW_TRACKING_URI={route(uri)} mlflow experiments restore -x "
                         f"{experiment.experiment_id}), or start a new run logging to another experiment with "
                         "--set tracking.experiment=NAME")
    if experiment is None:
        artifacts = (Path.cwd() / "mlartifacts").as_uri() if route(uri).startswith("sqlite") else None
        return mlflow.create_experiment(name, artifact_location=artifacts, tags=EXPERIMENT_KIND)
    for key, value in EXPERIMENT_KIND.items():
        if key not in experiment.tags:  # made before solrl set it, or by someone else
            mlflow.MlflowClient().set_experiment_tag(experiment.experiment_id, key, value)
    return experiment.experiment_id


_present: set[tuple[str, str]] = set()  # (store, MLflow run id) found in its store by this process


def run_gone(info: dict) -> str | None:
    """Why the MLflow run that run.json `info` records cannot be logged to, in words ("no longer exists": not in its
    store, e.g. the store was deleted or replaced; "was deleted": in the UI or CLI); None when it is there. Asked
    once per process and run."""
    key = (info["tracking_uri"], info["mlflow_run_id"])
    if key in _present:
        return None
    from mlflow.exceptions import MlflowException

    client = connect(info["tracking_uri"]).MlflowClient()
    try:
        found = client.get_run(info["mlflow_run_id"])
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return "no longer exists"
        raise
    if found.info.lifecycle_stage == "deleted":
        return "was deleted"
    _present.add(key)
    return None


def ensure_mlflow_run(run: RunDir, cfg: RunConfig, say=None, keep_running: bool = False) -> dict:
    """Create the run's MLflow run once, at `tracking_uri(cfg)`, and record it in the run directory's run.json; later
    calls (resumes, from any folder) return the recorded one: the default store follows the working directory, so
    the run directory, not the folder a command runs from, says where its MLflow run is. run.json records the store
    as configured (a sqlite file, not the server that served it then; a relative path made absolute). Either way,
    first a run whose artifacts need a server that is not there is refused in one line (`check_artifact_route`).

    A recorded MLflow run that is gone from its store (`run_gone`) is made again there: the markers of what was
    logged are forgotten, so `solrl train` logs every iteration, evaluation and audit into the new run, and `say`
    (default: a line on stderr) says so once. A new MLflow run is ended FINISHED at once unless `keep_running` (what
    trains it marks its status: flows/tracking_status.py)."""
    info = run.run_info()
    if info is not None:
        check_artifact_route(info["tracking_uri"], run_id=info["mlflow_run_id"])
        with tracking_errors(info["tracking_uri"], "the run's MLflow run"):
            gone = run_gone(info)
        if gone is None:
            return info
        uri = store_location(info["tracking_uri"])
    else:  # a first run, or one whose run.json was deleted after it logged (its markers say so)
        uri, gone = store_location(tracking_uri(cfg)), None
    lost_record = info is None and bool(logged_markers(run))
    check_artifact_route(uri, experiment=cfg.tracking.experiment)
    with tracking_errors(uri, "a new MLflow run"):
        mlflow = connect(uri)
        from mlflow.entities import Param
        from mlflow.tracking.context.registry import resolve_tags

        experiment_id = _experiment_id(cfg.tracking.experiment, uri)
        client = mlflow.MlflowClient()
        made = client.create_run(experiment_id, run_name=cfg.name,  # with the user and source `start_run` tags
                                 tags=resolve_tags({"family": cfg.family, "run_dir": location(run.root)}))
        run_id = made.info.run_id
        client.log_batch(run_id, params=[Param(key, value) for key, value in run_params(cfg).items()])
        client.log_dict(run_id, redact_tree(cfg.model_dump(mode="json")), CONFIG_ARTIFACT)  # no credential in clear
        if not keep_running:  # nothing trains it now: ended at once, as `mlflow.start_run`'s block ends it
            client.set_terminated(run_id, "FINISHED")
        new = {"tracking_uri": redact(uri), "mlflow_run_id": run_id, "experiment_id": experiment_id}
    if gone is not None or lost_record:
        forget_logged(run)  # first: what they say was logged went to a run that is gone or no longer known
    write_json_atomic(run.run_json, new)
    _present.add((new["tracking_uri"], new["mlflow_run_id"]))
    if gone is not None:
        (say or _stderr)(f"solrl: the MLflow run {info['mlflow_run_id']} {gone} in {info['tracking_uri']}: logging to "
                         f"a new run {new['mlflow_run_id']}; `solrl train` logs the run's earlier iterations and "
                         "evaluations there again")
    elif lost_record:
        (say or _stderr)(f"solrl: {run.run_json} was missing, so the MLflow run this run logged to is unknown: logging "
                         f"to a new run {new['mlflow_run_id']} in experiment '{cfg.tracking.experiment}' (the earlier "
                         "iterations and evaluations again); the earlier MLflow run, if it is still there, is left "
                         "beside it")
    return new


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def logged_markers(run: RunDir) -> list[Path]:
    """The files that record what was logged to the run's MLflow run (`log_iteration`, `log_audit`,
    `log_evaluation`)."""
    iterations = [*run.root.glob(f"iter_[0-9]*/manifests/{logged_marker(run, 0).name}"),
                  *run.root.glob(f"iter_[0-9]*/manifests/{AUDIT_MARKER}")]
    return [*iterations, *run.root.glob(f"eval/step_[0-9]*/{EVAL_MARKER}")]


def forget_logged(run: RunDir) -> None:
    """Forget what was logged (its MLflow run is gone): the next `solrl train` logs it all again."""
    for marker in logged_markers(run):
        marker.unlink(missing_ok=True)


@contextlib.contextmanager
def tracking_errors(uri: str, what: str, info: dict | None = None):
    """Turn MLflow failing while logging `what` to store `uri` into the one-line TrackingFailed (see
    `tracking_failure`); any other error (a bug) keeps its traceback. `info`: the run's run.json, when it has one."""
    try:
        yield
    except SolrlError:
        raise
    except Exception as exc:
        error = tracking_failure(exc, uri, what, info)
        if error is None:
            raise
        raise error from exc


def tracking_failure(exc: Exception, uri: str, what: str, info: dict | None = None) -> TrackingFailed | None:
    """`exc`, raised by MLflow while logging `what` to store `uri`, as a one-line TrackingFailed when it is MLflow's
    store that failed: its server does not answer (refused, timed out after MLflow's bounded retries), its database
    failed (a full disk, locked, read-only), or the MLflow run of `info` is gone; None for anything else."""
    where = route(uri)
    again = ("the run directory is complete and consistent up to there, and nothing is lost: once MLflow answers, "
             "run the same command again (it resumes, and logs what is not logged yet)")
    cause = _store_failure(exc, where)
    if cause is not None:
        limited = limit_error(exc)  # a `ulimit` the store's file reached: the limit is what to fix
        if limited is not None:
            return TrackingFailed(f"MLflow at {where} failed while logging {what}: {limited}")
        store = sqlite_file(where)
        if "disk is full" in cause and store is not None:
            free = format_bytes(shutil.disk_usage(closest_existing(store)).free)
            return TrackingFailed(f"MLflow at {where} failed while logging {what} ({cause}; {free} free on the disk "
                                  f"of {store}); free some space there or use another tracking.uri, then run the same "
                                  "command again (it resumes, and logs what is not logged yet)")
        return TrackingFailed(f"MLflow at {where} failed while logging {what} ({cause}); {again}")
    if info is not None:
        _present.discard((info["tracking_uri"], info["mlflow_run_id"]))
        try:
            gone = run_gone(info)
        except Exception:  # noqa: BLE001 - the question failed too: report the first error as it is
            gone = None
        if gone is not None:
            return TrackingFailed(f"the MLflow run {info['mlflow_run_id']} {gone} in {info['tracking_uri']} (found "
                                  f"while logging {what}); run the same command again: it logs to a new MLflow run, "
                                  "the run's earlier iterations too")
    return None


def _store_failure(exc: Exception, where: str) -> str | None:
    """Why the store at `where` failed, in a few words, when `exc` says it did (see `tracking_failure`); else None."""
    import requests
    from mlflow.exceptions import MlflowException

    chain = list(itertools.islice(causes(exc), 10))
    text = " ".join(str(e) for e in chain)
    if "OperationalError" in text or any(type(e).__name__ == "OperationalError" for e in chain):
        drivers = [str(e) for e in chain if type(e).__name__ == "OperationalError"]
        return "database error: " + short_cause(_database_message(drivers[-1] if drivers else text))
    transport = any(isinstance(e, (requests.RequestException, ConnectionError, TimeoutError)) for e in chain) or any(
        isinstance(e, MlflowException) and str(e).startswith("API request to") for e in chain)
    answered = health_failure(where.rstrip("/") + "/health") if is_server(where) else None
    if not transport and answered is None:
        return None
    if answered is not None:
        return answered
    return "timed out" if "timeout" in text.lower() else short_cause(str(exc))


def _database_message(text: str) -> str:
    """The database's own words in an OperationalError's text (sqlite3's "database or disk is full"), not what
    SQLAlchemy or MLflow put around them (a "(raised as a result of Query-invoked autoflush ...)" line, the SQL)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        found = re.search(r"\((?:\w+\.)*OperationalError\)\s*(.+)", line)
        if found:
            return found.group(1)
    return next((line for line in lines if not line.startswith("(raised as a result of")), text.strip())


def short_cause(text: str) -> str:
    return text if len(text) <= CAUSE_CHARS else text[: CAUSE_CHARS - 3] + "..."


def iteration_metrics(run: RunDir, iteration: int) -> dict[str, float]:
    """The numbers of one finished iteration, read from its stage manifests."""
    s = {stage: run.manifest(iteration, stage)["summary"] for stage in STAGES}
    metrics = {
        "reward/explore_mean": s["score_explore"]["mean"],
        "reward/explore_min": s["score_explore"]["min"],
        "reward/explore_max": s["score_explore"]["max"],
        "reward/explore_std": s["score_explore"]["std"],
        "reward/train_mean": s["score_final"]["mean"],
        "reward/train_min": s["score_final"]["min"],
        "reward/train_max": s["score_final"]["max"],
        "reward/selected_spread": s["score_final"]["std"],
        "loss/total": s["update"]["loss"],
        "loss/policy": s["update"]["policy_loss"],
        "loss/kl_to_reference": s["update"]["kl"],
        "train/grad_norm": s["update"]["grad_norm"],
        "train/old_eta": s["update"]["old_eta"],
        "train/step": s["update"]["step"],
    }
    for key in ("spearman", "kendall", "spearman_within_prompt", "kendall_within_prompt"):
        value = s["score_final"].get(f"fidelity_{key}")
        if value is not None and np.isfinite(value):
            metrics[f"fidelity/{key}"] = value
    for key in ("low_precision_share", "calibration_rel_error", "layers_replaced", "layers_kept"):
        if s["quantize"].get(key) is not None:
            metrics[f"quant/{key}"] = s["quantize"][key]
    metrics["explore/steps"] = s["explore"].get("steps", s["quantize"].get("steps"))
    for stage in STAGES:
        metrics[f"time/{stage}_s"] = s[stage]["seconds"]
    for stage, shards in stage_shards(run, iteration).items():
        metrics[f"shards/{stage}_devices"] = len(shards)
        metrics.update({f"shards/{stage}_{shard['shard']}_s": shard["seconds"] for shard in shards})
    return {k: float(v) for k, v in metrics.items()}


def log_metrics_once(run_id: str, metrics: dict[str, float], step: int) -> dict[str, float]:
    """Log `metrics` at `step` into MLflow run `run_id`, except those whose last value at that step in its history
    is the same; return what was logged. The marker files say what was logged too, but one is written only after
    all of an iteration's logging, so a training stopped in between (or fired again by its schedule) would otherwise
    log metrics twice. A value that changed (its stage was computed again: solrl_core/run/staleness.py) is logged."""
    import mlflow

    client = mlflow.MlflowClient()
    new = {key: value for key, value in metrics.items()
           if not any(_same(last, value) for last in _last_values(client.get_metric_history(run_id, key), step))}
    if new:
        mlflow.log_metrics(new, step=step, run_id=run_id)
    return new


def _last_values(history, step: int) -> list[float]:
    """The values logged last at `step` (several when logged in the same millisecond)."""
    at_step = [m for m in history if m.step == step]
    last = max((m.timestamp for m in at_step), default=None)
    return [m.value for m in at_step if m.timestamp == last]


def _same(logged: float, value: float) -> bool:
    return logged == value or (math.isnan(logged) and math.isnan(value))


def _logged(marker, info: dict | None, completion_id: str | None = None) -> bool:
    """Whether `marker` says this completion (its id; None before completions had ids) was logged to the MLflow run
    of run.json `info` (a marker written before markers named their MLflow run counts as logged to it)."""
    if info is None or not marker.is_file():
        return False
    record = read_json(marker)
    return record.get("id") == completion_id and record.get("mlflow_run_id", info["mlflow_run_id"]) == \
        info["mlflow_run_id"]


def _describes(subject):
    """Give a logging function the words for what it logs (`subject(*args)`), which the logging thread quotes when
    MLflow does not answer (flows/tracking_queue.py)."""
    def mark(log):
        log.describe = subject
        return log
    return mark


def _where(run: RunDir) -> str:
    info = run.run_info()
    return f" to {route(info['tracking_uri'])}" if info is not None else ""


@_describes(lambda run, cfg, iteration: f"iteration {iteration}{_where(run)}")
def log_iteration(run: RunDir, cfg: RunConfig, iteration: int) -> dict[str, float]:
    """Log one finished iteration (once per completion of its update into its MLflow run: a marker file records
    which) and save its best/worst grid PNG. The artifacts read are checked first (solrl_core/run/integrity.py)."""
    marker = logged_marker(run, iteration)
    metrics = iteration_metrics(run, iteration)
    update_id = run.manifest(iteration, "update").get("id")
    if _logged(marker, run.run_info(), update_id):
        return metrics
    from PIL import Image

    for stage in ("quantize", "explore", "score_explore"):  # the grid and the report (the pool table checks its own)
        verify_stage(run, iteration, stage)
    info = ensure_mlflow_run(run, cfg)
    run_id = info["mlflow_run_id"]
    pool = run.stage_dir(iteration, "explore") / "pool.zarr"
    reward = read_table(run.stage_dir(iteration, "score_explore") / "rewards.zarr", ["reward"])[0]["reward"]
    grid = best_worst_grid(pool, reward, cfg.tracking.grid_prompts)
    save_image(Image.fromarray(grid), run.iteration_dir(iteration) / "best_worst.png")
    report = json.loads((run.stage_dir(iteration, "quantize") / "report.json").read_text())
    with tracking_errors(info["tracking_uri"], f"iteration {iteration}", info):
        client = connect(info["tracking_uri"]).MlflowClient()
        log_metrics_once(run_id, metrics, iteration)
        client.set_tag(run_id, "explore_backend", report["precision"])
        client.set_tag(run_id, "explore_backend_reason", report["reason"][:5000])
        log_pool(run, cfg, iteration, run_id, report)
        client.log_dict(run_id, stage_shards(run, iteration), f"shards/iter_{iteration:04d}.json")  # device, host, pid
        for event in report.get("escalations", []):
            if event["iteration"] == iteration - 1:  # decided after the previous iteration, applied from this one
                client.log_dict(run_id, event, f"guardrail/escalation_after_iter{event['iteration']:04d}.json")
                log_metrics_once(run_id, {"guardrail/level": event["to_level"]}, iteration)
        if cfg.tracking.grid_prompts:
            client.log_image(run_id, grid, key="pool/best_worst", step=iteration)
    write_json_atomic(marker, {"iteration": iteration, "id": update_id, "mlflow_run_id": run_id})
    return metrics


def log_pool(run: RunDir, cfg: RunConfig, iteration: int, run_id: str, report: dict) -> str:
    """Log an iteration's pool into MLflow run `run_id`, under `pool/iter_NNNN/`; return that path.

    - `candidates.json`: MLflow table, one row per explore candidate (prompt, seed, proxy reward, final reward where
      a training sample was made from the seed, selected; solrl_core.inspect.pool_table) and a `thumbnail` image
      column (the candidate, at most THUMBNAIL px; a video: a strip of its frames; MLflow stores each under
      `table_images/`);
    - `top_bottom/prompt_NNNN.png`: per prompt, its top-K and bottom-K candidates by proxy reward (K = select.k/2);
      for a pool of videos also `prompt_NNNN.gif`, the same grid animated over the frames;
    - `proxy_vs_final.png`: final against proxy reward of the selected seeds, with the ranking fidelity;
    - `quantize_report.json`: the quantize stage's report: the explore precision and why, and per Linear layer
      whether it ran in low precision or stayed in full precision (and why), with its weight error.
    Safe to call again after a crash: a table already logged is not appended to a second time.
    """
    import mlflow

    client = mlflow.MlflowClient()
    path = pool_artifact_path(iteration)
    table = pool_table(run, iteration)  # checks the stages' artifacts it reads
    pool = run.stage_dir(iteration, "explore") / "pool.zarr"
    if f"{path}/candidates.json" not in {a.path for a in client.list_artifacts(run_id, path)}:
        _log_table(run_id, {**{k: v.tolist() for k, v in table.items()}, "thumbnail": _thumbnails(pool)},
                   f"{path}/candidates.json")
    k = max(1, cfg.select.k // 2)
    for prompt, grid in top_bottom_grids(pool, table["proxy_reward"], k, tile=POOL_TILE).items():
        client.log_image(run_id, grid, artifact_file=f"{path}/top_bottom/prompt_{prompt:04d}.png")
    prompts = read_table(pool, [])[1]["prompts"]
    with tempfile.TemporaryDirectory() as tmp:
        for prompt, frames in top_bottom_animations(pool, table["proxy_reward"], k, tile=POOL_TILE).items():
            gif = Path(tmp) / f"prompt_{prompt:04d}.gif"
            save_gif(frames, gif)
            client.log_artifact(run_id, str(gif), f"{path}/top_bottom")
        scatter = Path(tmp) / "proxy_vs_final.png"
        proxy_final_scatter(table["proxy_reward"], table["final_reward"], table["prompt_index"], scatter,
                            prompts=prompts, title=f"iteration {iteration}: selected seeds")
        client.log_artifact(run_id, str(scatter), path)
    client.log_dict(run_id, report, f"{path}/quantize_report.json")
    return path


def _thumbnails(pool: Path) -> list:
    """The pool's images as PIL images of at most THUMBNAIL px on the longer side (smaller ones as they are)."""
    from PIL import Image

    out = []
    for array in read_table(pool, ["image"])[0]["image"]:
        image = Image.fromarray(frame_strip(array))  # a video: a strip of its frames, each at most THUMBNAIL px
        image.thumbnail((THUMBNAIL * frame_count(array), THUMBNAIL))
        out.append(image)
    return out


def _log_table(run_id: str, data: dict[str, list], artifact_file: str) -> None:
    """`MlflowClient.log_table`, as long as the run's list of tables has room. MLflow lists a run's tables in one
    tag (`mlflow.loggedArtifacts`) and silently cuts tag values at MAX_TAG_VAL_LENGTH characters (8000, ~130 pool
    tables), after which every log_table fails; later tables are written in the same JSON format, not listed
    (read them with `pandas.read_json(path, orient="split")`), without image columns (the UI shows only listed
    tables)."""
    import mlflow
    import pandas as pd
    from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS
    from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

    client = mlflow.MlflowClient()
    listed = client.get_run(run_id).data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]")
    entry = json.dumps({"path": artifact_file, "type": "table"})
    if len(listed) + len(entry) + 2 <= MAX_TAG_VAL_LENGTH:
        client.log_table(run_id, data, artifact_file)
    else:
        plain = {k: v for k, v in data.items() if not (v and hasattr(v[0], "resize"))}  # PIL images: not JSON
        client.log_text(run_id, pd.DataFrame(plain).to_json(orient="split", index=False), artifact_file)


@_describes(lambda run, cfg, evaluation: f"the evaluation after {plural(evaluation['step'], 'iteration')}"
           f"{_where(run)}")
def log_evaluation(run: RunDir, cfg: RunConfig, evaluation: dict) -> None:
    """Log `eval/<reward>` at step = iterations done (0 = before training), and the samples grid (once per MLflow
    run: a marker file records it). `evaluation`: its metrics.json record, read after checking its files."""
    step = evaluation["step"]
    marker = run.eval_dir(step) / EVAL_MARKER
    if _logged(marker, run.run_info()):
        return
    info = ensure_mlflow_run(run, cfg)
    run_id = info["mlflow_run_id"]
    with tracking_errors(info["tracking_uri"], f"the evaluation after {plural(step, 'iteration')}", info):
        client = connect(info["tracking_uri"]).MlflowClient()
        log_metrics_once(run_id, {f"eval/{k}": v for k, v in evaluation["metrics"].items()}, step)
        with local_file(run.eval_dir(step) / "samples.png") as samples:
            client.log_artifact(run_id, str(samples), f"eval/step_{step:04d}")
        client.log_dict(run_id, {key: evaluation.get(key, []) for key in ("shards", "score_shards")},
                        f"eval/step_{step:04d}/shards.json")
    write_json_atomic(marker, {"step": step, "mlflow_run_id": run_id})


AUDIT_METRICS = {
    "audit/spearman": "spearman_within_prompt",
    "audit/kendall": "kendall_within_prompt",
    "audit/spearman_pooled": "spearman_pooled",
    "audit/kendall_pooled": "kendall_pooled",
    "audit/topk_overlap": "topk_overlap",
    "audit/bottomk_overlap": "bottomk_overlap",
}


@_describes(lambda run, cfg, iteration: f"the audit of iteration {iteration}{_where(run)}")
def log_audit(run: RunDir, cfg: RunConfig, iteration: int) -> dict[str, float]:
    """Log a finished audit (once per MLflow run: a marker file records it) at step = iteration. `audit/spearman` and
    `audit/kendall` are the means over prompt groups (what selection depends on); `*_pooled` over all candidates."""
    summary = run.manifest(iteration, "audit")["summary"]
    metrics = {key: float(summary[name]) for key, name in AUDIT_METRICS.items()
               if summary.get(name) is not None and np.isfinite(summary[name])}
    metrics["time/audit_s"] = float(summary["seconds"])
    marker = run.iteration_dir(iteration) / "manifests" / AUDIT_MARKER
    audit_id = run.manifest(iteration, "audit").get("id")
    if _logged(marker, run.run_info(), audit_id):
        return metrics
    info = ensure_mlflow_run(run, cfg)
    with tracking_errors(info["tracking_uri"], f"the audit of iteration {iteration}", info):
        log_metrics_once(info["mlflow_run_id"], metrics, iteration)
        connect(info["tracking_uri"]).MlflowClient().log_dict(info["mlflow_run_id"], summary,
                                                              f"audit/summary_iter{iteration:04d}.json")
    write_json_atomic(marker, {"iteration": iteration, "id": audit_id, "mlflow_run_id": info["mlflow_run_id"]})
    return metrics


def log_report(root: Path, uri: str, experiment: str, kind: str, metrics: dict[str, float], step: int,
               files: list[Path], tags: dict[str, str] | None = None, dicts: dict[str, dict] | None = None) -> dict:
    """Log a report of `kind` (bench, matrix: its Markdown, plots and JSON under artifacts `<kind>/`) and its headline
    `metrics` at `step` to one MLflow run of `experiment`, created once per report directory (`<root>/mlflow.json`
    records it): a resumed benchmark or matrix logs the regenerated report into the same run."""
    record = Path(root) / "mlflow.json"
    mlflow = connect(uri)
    info = read_json(record) if record.is_file() else None
    if info is None or info.get("tracking_uri") != redact(uri):
        experiment_id = _experiment_id(experiment, uri)
        with mlflow.start_run(experiment_id=experiment_id, run_name=f"{kind}-{Path(root).name}") as active:
            info = {"tracking_uri": redact(uri), "mlflow_run_id": active.info.run_id, "experiment_id": experiment_id}
        write_json_atomic(record, info)
    with mlflow.start_run(run_id=info["mlflow_run_id"]):
        mlflow.set_tags({f"{kind}_dir": str(Path(root).resolve()), "kind": kind, **(tags or {})})
        if metrics:
            mlflow.log_metrics(metrics, step=step)
        for path in files:
            mlflow.log_artifact(str(path), artifact_path=kind)
        for name, value in (dicts or {}).items():
            mlflow.log_dict(value, f"{kind}/{name}")
    return info


def log_bench_report(root: Path, uri: str, experiment: str, report: dict, files: list[Path]) -> dict:
    """A benchmark report (`log_report`). Headline metrics, at step = iterations: `bench/<family>/final_reward`
    (mean over seeds), `.../final_reward_std`, `.../target_cost_gpu_s` and `.../speedup_vs_<reference>`."""
    metrics: dict[str, float] = {}
    for family, fam in report.get("families", {}).items():
        for key in ("final_reward", "final_reward_std"):
            value = fam.get(key)
            if value is not None and np.isfinite(value):
                metrics[f"bench/{family}/{key}"] = float(value)
        ttt = fam.get("time_to_target", {}).get("gpu")
        if ttt and ttt.get("cost") is not None:
            metrics[f"bench/{family}/target_cost_gpu_s"] = float(ttt["cost"])
        for ref, ratio in (ttt or {}).get("speedup", {}).items():
            if ratio is not None and np.isfinite(ratio):
                metrics[f"bench/{family}/speedup_vs_{ref}"] = float(ratio)
    return log_report(root, uri, experiment, "bench", metrics, int(report.get("iterations", 0)), files,
                      tags={"cost_axis": str(report.get("cost", {}).get("title", ""))[:5000]},
                      dicts={"runs.json": report.get("runs", {})})


def log_matrix_report(root: Path, uri: str, experiment: str, report: dict, files: list[Path]) -> dict:
    """A learning-matrix report (`log_report`): per cell `matrix/<world>/<objective>/<family>/rise` (mean over seeds)
    and its interval's ends `.../rise_lo`, `.../rise_hi`."""
    metrics: dict[str, float] = {}
    for name, cell in report.get("cells", {}).items():
        rise = cell.get("rise") or {}
        for key, suffix in (("value", "rise"), ("lo", "rise_lo"), ("hi", "rise_hi")):
            value = rise.get(key)
            if value is not None and np.isfinite(value):
                metrics[f"matrix/{name}/{suffix}"] = float(value)
    return log_report(root, uri, experiment, "matrix", metrics, 0, files)
