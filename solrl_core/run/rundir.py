"""The run directory: where every stage's artifact lives, how completion is recorded, and who holds the run.

Layout:
    <run>/config.yaml                 resolved config, frozen at the first run
    <run>/run.json                    tracking URI and MLflow run id
    <run>/.lock                       flock held by the process that runs (a lease object on object stores)
    <run>/init/                       initial adapters (iteration 0's "previous checkpoint")
    <run>/iter_0003/<stage>/          a stage's artifact directory (written as <stage>.partial, then moved)
    <run>/iter_0003/manifests/<stage>.json   completion manifest, written last (atomically), listing the artifact's
                                             files (size, digest) that consumers check: solrl_core/run/integrity.py
    <run>/iter_0003/manifests/<stage>.pending.json   what the attempt under way started from; the journal of its
                                      commit (solrl_core/run/commit.py) once its artifact is finished
    <run>/iter_0003/<stage>.old/      the artifact being replaced, while a re-run's artifact is moved in
    <run>/eval/step_0003/             held-out evaluation after 3 iterations (metrics.json written last)
    <run>/learning_curve.png          the held-out evaluations, plotted at the end of a training

Before a command holds the run, `check_layout` refuses in one line a name of this layout held by something of the
other kind (a folder where a file belongs or the reverse, a link that leads nowhere or loops) and a config.yaml of
the user's own: each would otherwise fail the command midway, or be overwritten.

A stage is complete exactly when its manifest exists. Each completion has an id, and its manifest records the ids of
the completions it read (`inputs`): solrl_core/run/staleness.py tells from them which stages a re-run made stale. A
re-run keeps the old artifact and manifest until its own artifact is finished, then commits it (solrl_core/run/commit.py);
whoever holds the run next finishes a commit that was interrupted. The run directory is a local path or any fsspec
URL (s3://bucket/run, ...): see solrl_core/run/storage.py for what changes on object stores.
"""

from __future__ import annotations

import fcntl
import time
from contextlib import contextmanager
from pathlib import Path

from solrl_core.run import commit
from solrl_core.run import integrity
from solrl_core.errors import DamagedArtifactError, SolrlError
from solrl_core.run.stage_table import BY_NAME, STAGES
from solrl_core.run.lineage import kept_id, lineage, new_completion_id
from solrl_core.run.storage import (
    Lease,
    LockWait,
    as_path,
    check_remote_access,
    holder_text,
    is_remote,
    read_json,
    remove_tree,
    write_json_atomic,
)
from solrl_core.userfiles import DIRECTORY, FILE, check_output_dir, entry_kind, user_os_errors

__all__ = ["STAGES", "RunDir", "read_json", "write_json_atomic"]


CURVE_FILE = "learning_curve.png"  # the plot of a finished training's evaluations (solrl_core/learning_curve.py)

# The run directory's own names: what each must be when present (solrl writes them as such).
TOP_FILES = (".lock", "config.yaml", "run.json", CURVE_FILE)
TOP_DIRS = ("init", "init.partial", "eval")
COMMIT_KEYS = ("summary", "id", "inputs")  # what a stage commit's journal holds for its manifest
ITERATION_FILES = ("best_worst.png",)


def start_attempt(pending, partial, inputs: dict, resume: bool, replacing: bool) -> None:
    """Keep `partial` (for the attempt to resume in) only when `resume` and the attempt that left it started from the
    same `inputs`; record in `pending` what this attempt starts from. A partial left before attempts were recorded is
    kept unless it would replace a complete artifact (`replacing`)."""
    if pending.is_file():
        keep = resume and commit.read_journal(pending).get("inputs") == inputs
    else:
        keep = resume and not replacing
    if not keep:
        remove_tree(partial)
    write_json_atomic(pending, {"inputs": inputs})


class RunDir:
    def __init__(self, root):
        self.root = as_path(root)  # a Path, or a UPath for a URL

    # ---- layout -----------------------------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def init_dir(self) -> Path:
        return self.root / "init"

    def iteration_dir(self, iteration: int) -> Path:
        return self.root / f"iter_{iteration:04d}"

    def stage_dir(self, iteration: int, stage: str) -> Path:
        return self.iteration_dir(iteration) / stage

    def partial_dir(self, iteration: int, stage: str) -> Path:
        return self.iteration_dir(iteration) / f"{stage}.partial"

    def manifest_path(self, iteration: int, stage: str) -> Path:
        return self.iteration_dir(iteration) / "manifests" / f"{stage}.json"

    def pending_path(self, iteration: int, stage: str) -> Path:
        return self.iteration_dir(iteration) / "manifests" / f"{stage}.pending.json"

    def aside_dir(self, iteration: int, stage: str) -> Path:
        return self.iteration_dir(iteration) / f"{stage}.old"

    def eval_dir(self, step: int) -> Path:
        """The held-out evaluation after `step` iterations (step 0 = the initial policy): solrl_core/evaluate.py."""
        return self.root / "eval" / f"step_{step:04d}"

    def eval_partial_dir(self, step: int) -> Path:
        return self.root / "eval" / f"step_{step:04d}.partial"

    def eval_pending_path(self, step: int) -> Path:
        return self.root / "eval" / f"step_{step:04d}.pending.json"

    def eval_aside_dir(self, step: int) -> Path:
        return self.root / "eval" / f"step_{step:04d}.old"

    def evaluation(self, step: int) -> dict | None:
        """The finished evaluation after `step` iterations (its metrics.json record, its files checked against the
        inventory it lists: solrl_core/run/integrity.py), None if there is none yet."""
        record = self.eval_dir(step) / "metrics.json"
        return integrity.evaluation_record(self, step) if record.is_file() else None

    def evaluations(self) -> list[dict]:
        """The finished evaluations' metrics.json records, by step (read, not checked file by file)."""
        steps = [int(p.name[5:]) for p in self.root.glob("eval/step_[0-9]*")
                 if p.name[5:].isdigit() and (p / "metrics.json").is_file()]
        return [self._evaluation_metrics(step) for step in sorted(steps)]

    def _evaluation_metrics(self, step: int) -> dict:
        path = self.eval_dir(step) / "metrics.json"
        record = integrity.read_record(path, integrity.relative_name(self, path), integrity.eval_remedy(self, step))
        record.pop(integrity.FILES_KEY, None)
        return record

    def commit_evaluation(self, step: int) -> dict:
        """Put the finished partial evaluation (its metrics.json included) in place of the previous one, journaled
        like a stage (solrl_core/run/commit.py); return its metrics.json record."""
        commit.begin(self.eval_pending_path(step), {})
        return self.finish_eval_commit(step)

    def finish_eval_commit(self, step: int) -> dict:
        commit.finish(self.eval_pending_path(step), self.eval_partial_dir(step), self.eval_dir(step),
                      self.eval_aside_dir(step))
        return self.evaluation(step)

    def checkpoint_dir(self, iteration: int) -> Path:
        """The policy state after `iteration`'s update; iteration -1 is the initial state."""
        return self.init_dir if iteration < 0 else self.stage_dir(iteration, "update") / "checkpoint"

    # ---- completion ---------------------------------------------------------------------------------------------
    def is_complete(self, iteration: int, stage: str) -> bool:
        return self.manifest_path(iteration, stage).is_file()

    def manifest(self, iteration: int, stage: str) -> dict:
        path = self.manifest_path(iteration, stage)
        return integrity.read_record(path, integrity.relative_name(self, path),
                                     integrity.stage_remedy(self, iteration, stage))

    def run_info(self) -> dict | None:
        """run.json (the run's MLflow run: tracking_uri, mlflow_run_id, experiment_id), None when not written yet."""
        if not self.run_json.is_file():
            return None
        remedy = (f"it only records this run's MLflow run: delete {self.run_json} and run the command again (training "
                  "then logs to a new MLflow run; the run's artifacts are kept)")
        info = integrity.read_record(self.run_json, "run.json", remedy)
        wrong = [key for key in ("tracking_uri", "mlflow_run_id") if not isinstance(info.get(key), str)]
        if wrong:
            raise DamagedArtifactError(f"run.json is damaged (no {' or '.join(wrong)}); {remedy}")
        return info

    def stage_status(self, iteration: int, stage: str) -> str:
        if self.is_complete(iteration, stage):
            return "complete"
        if self.partial_dir(iteration, stage).exists() or self.stage_dir(iteration, stage).exists():
            return "partial"
        return "pending"

    def iterations_present(self) -> list[int]:
        if not self.root.is_dir():
            return []
        return sorted(int(p.name[5:]) for p in self.root.glob("iter_[0-9][0-9][0-9][0-9]") if p.is_dir())

    def invalidate(self, iteration: int, stage: str) -> None:
        """Forget a stage's result: manifest first (so a crash never leaves a manifest without its artifact)."""
        self.manifest_path(iteration, stage).unlink(missing_ok=True)
        self.pending_path(iteration, stage).unlink(missing_ok=True)
        for path in (self.stage_dir(iteration, stage), self.partial_dir(iteration, stage),
                     self.aside_dir(iteration, stage)):
            remove_tree(path)

    def start_attempt(self, iteration: int, stage: str, inputs: dict, resume: bool) -> None:
        """Before a stage runs: keep its `.partial` directory (for the stage to resume in) only when `resume` and the
        attempt that left it started from the same `inputs`; record what this attempt starts from."""
        start_attempt(self.pending_path(iteration, stage), self.partial_dir(iteration, stage), inputs,
                      resume, replacing=self.is_complete(iteration, stage))

    @contextmanager
    def stage_output(self, iteration: int, stage: str, resume_partial: bool = False):
        """Yield the `.partial` directory to write the stage's artifact into. It stays there until the stage is
        committed (`commit`, by stages/runner.run_stage): the stage's previous artifact, if any, stays complete
        until then. With `resume_partial` an existing partial directory is kept (the stage resumes inside it);
        otherwise it is cleared first.
        """
        partial = self.partial_dir(iteration, stage)
        if not resume_partial:
            remove_tree(partial)
        partial.mkdir(parents=True, exist_ok=True)
        yield partial

    def commit(self, iteration: int, stage: str, summary: dict, inputs: dict) -> dict:
        """Put the finished `.partial` artifact in place of the stage's previous one (if any) and write its manifest,
        journaled (solrl_core/run/commit.py); return the manifest."""
        record = {"summary": summary, "id": new_completion_id(), "inputs": inputs}
        commit.begin(self.pending_path(iteration, stage), record)
        return self.finish_commit(iteration, stage)

    def finish_commit(self, iteration: int, stage: str) -> dict:
        """Carry an interrupted commit of the stage to its end; return the manifest."""
        return commit.finish(
            self.pending_path(iteration, stage), self.partial_dir(iteration, stage), self.stage_dir(iteration, stage),
            self.aside_dir(iteration, stage),
            lambda record: self.complete(iteration, stage, record["summary"], record["id"], record["inputs"]),
            keys=COMMIT_KEYS,
        )

    def recover(self) -> list[str]:
        """Finish every commit a stopped process left under way (in stages and evaluations); return what it
        finished, as paths of their journals."""
        finished = []
        for journal in sorted(self.root.glob("iter_[0-9]*/manifests/*.pending.json")):
            if self.recover_stage(int(journal.parent.parent.name[5:]), journal.name.removesuffix(".pending.json")):
                finished.append(str(journal))
        for journal in sorted(self.root.glob("eval/step_[0-9]*.pending.json")):
            if commit.pending(journal) is not None:
                self.finish_eval_commit(int(journal.name[5:9]))
                finished.append(str(journal))
        return finished

    def recover_stage(self, iteration: int, stage: str) -> bool:
        """Finish the stage's commit if a stopped process left it under way; whether there was one."""
        if commit.pending(self.pending_path(iteration, stage), COMMIT_KEYS) is None:
            return False
        self.finish_commit(iteration, stage)
        return True

    def complete(self, iteration: int, stage: str, summary: dict | None = None, completion_id: str | None = None,
                 inputs: dict | None = None) -> dict:
        """Write the stage's manifest: its artifact's inventory, its id (the manifest it replaces keeps its id when
        the artifact is the same, bit for bit: solrl_core/run/staleness.py) and the ids of its inputs."""
        manifest = {"stage": stage, "iteration": iteration, "completed_at": time.time(), "summary": summary or {}}
        self._record_files(iteration, stage, manifest)
        completion_id = kept_id(self._replaced_manifest(iteration, stage), manifest[integrity.FILES_KEY], completion_id)
        manifest.update(lineage(completion_id, inputs))  # solrl_core/run/lineage.py
        write_json_atomic(self.manifest_path(iteration, stage), manifest)
        return manifest

    def _replaced_manifest(self, iteration: int, stage: str) -> dict | None:
        """The manifest a completion replaces (None: none, or damaged)."""
        path = self.manifest_path(iteration, stage)
        try:
            return read_json(path) if path.is_file() else None
        except ValueError:  # not valid JSON (json.JSONDecodeError, UnicodeDecodeError): nothing to keep
            return None

    def _record_files(self, iteration: int, stage: str, manifest: dict) -> None:
        """The artifact's inventory, checked by every consumer before it reads (solrl_core/run/integrity.py)."""
        manifest[integrity.FILES_KEY] = integrity.inventory(self.stage_dir(iteration, stage))

    # ---- ownership ----------------------------------------------------------------------------------------------
    def check_writable(self) -> None:
        """A SolrlError naming the path when a local run directory is a file (or a link that leads nowhere), or
        cannot be created or written (its closest existing folder is not writable: permissions, a read-only
        filesystem): userfiles.check_output_dir. At an fsspec URL: the store answers with the credentials given
        (storage.check_remote_access: one line naming what to set when they are missing or refused)."""
        if is_remote(self.root):
            check_remote_access(self.root, "--run-dir")
        else:
            check_output_dir(self.root, "--run-dir")

    def check_layout(self) -> None:
        """Refuse in one line a name of the run directory's layout (see the module's docstring) held by something of
        the other kind, or a link that leads nowhere or loops, and a config.yaml that solrl did not freeze (a user's
        own config: it would be taken for the run's, or overwritten). Local run directories; read-only."""
        if is_remote(self.root) or not Path(self.root).is_dir():
            return
        root = Path(self.root)
        for name in TOP_FILES:
            self._check_kind(root / name, FILE)
        for name in TOP_DIRS:
            self._check_kind(root / name, DIRECTORY)
        if self.config_path.is_file():
            with open(self.config_path, "rb") as fh:
                head = fh.read(1 << 16).decode("utf-8", "replace")
            if integrity.is_foreign_config(head):
                raise SolrlError(integrity.foreign_config_message(str(self.config_path)))
        for entry in sorted(root.glob("iter_[0-9]*")):
            if entry.name[5:].isdigit() and self._check_kind(entry, DIRECTORY):
                self._check_iteration(entry)
        if (root / "eval").is_dir():
            for entry in sorted((root / "eval").glob("step_[0-9]*")):
                self._check_kind(entry, FILE if entry.name.endswith(".json") else DIRECTORY)

    def _check_iteration(self, folder: Path) -> None:
        for entry in sorted(folder.iterdir()):
            if entry.name in ITERATION_FILES:
                self._check_kind(entry, FILE)
            elif entry.name == "manifests" or entry.name.split(".")[0] in BY_NAME:
                self._check_kind(entry, DIRECTORY)
        if (folder / "manifests").is_dir():
            for entry in sorted((folder / "manifests").iterdir()):
                if entry.name.endswith(".json"):
                    self._check_kind(entry, FILE)

    def _check_kind(self, path: Path, kind: str) -> bool:
        """Whether `path` exists, as the `kind` (userfiles.FILE or DIRECTORY) solrl keeps there; a SolrlError naming
        it when something else is there."""
        found = entry_kind(path)
        if found is None:
            return False
        if found == kind:
            return True
        name = integrity.relative_name(self, path)
        what = "the run's lock file" if path.name == ".lock" else f"{kind} it writes"
        raise SolrlError(f"{name} in run directory {self.root} is {found}, where solrl keeps {what}; move it out of "
                         "the run directory and run the command again")

    def holder(self) -> str | None:
        """Who holds the run directory now ("pid 123 on host node1 since 2025-01-31 14:02:07": a live process runs
        it), None when no one does. Asked without taking the lock (a shared lock tried and let go at once)."""
        if is_remote(self.root):
            return Lease(self.root / ".lock").holder()
        try:
            fh = open(self.root / ".lock")
        except OSError:  # no lock file: never run, or not ours to read
            return None
        with fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return fh.read().strip() or "another process"
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            return None

    @contextmanager
    def hold(self, wait: float = 0.0, say=None):
        """Hold the run directory exclusively (an OS file lock: released even when the process is killed; on object
        stores a lease object, see storage.Lease). While another live process holds it, wait up to `wait` seconds,
        saying once (by `say`, default: a line on stderr) whom it waits for; then refuse in one line. A lock whose
        holder died is free (the OS released it; an abandoned lease is taken over)."""
        self.check_layout()
        if is_remote(self.root):  # no mkdir first: s3fs would create a missing bucket
            self.check_writable()
            lease = Lease(self.root / ".lock")
            lease.acquire(str(self.root), wait, say)
            try:
                self.recover()
                yield self
            finally:
                lease.release()
            return
        self.check_writable()
        lock_path = self.root / ".lock"
        created = not self.root.exists()
        with user_os_errors(f"--run-dir {self.root}"):  # what check_writable cannot see (a full disk, root's access)
            self.root.mkdir(parents=True, exist_ok=True)
            fh = open(lock_path, "a+")
        waiting = LockWait(str(self.root), wait, say)
        try:
            while True:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    fh.seek(0)
                    waiting.pause(fh.read().strip() or "another process")  # past the wait: RunDirLockedError
        except BaseException:  # refused, or interrupted while waiting
            fh.close()
            raise
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(holder_text())
            fh.flush()
            self.recover()
            yield self
        except BaseException:
            if created and [p.name for p in self.root.iterdir()] == [".lock"]:
                lock_path.unlink()  # refused before anything was written (e.g. by a preflight check): leave no trace
                self.root.rmdir()
            raise
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            fh.close()
