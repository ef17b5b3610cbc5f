"""The run directory: where every stage's artifact lives, how completion is recorded, and who holds the run.

Layout:
    <run>/config.yaml                 resolved config, frozen at the first run
    <run>/run.json                    tracking URI and MLflow run id
    <run>/.lock                       flock held by the process that runs (a lease object on object stores)
    <run>/init/                       initial adapters (iteration 0's "previous checkpoint")
    <run>/iter_0003/<stage>/          a stage's artifact directory (written as <stage>.partial, then moved)
    <run>/iter_0003/manifests/<stage>.json   completion manifest, written last (atomically)
    <run>/eval/step_0003/             held-out evaluation after 3 iterations (metrics.json written last)

A stage is complete exactly when its manifest exists. The run directory is a local path or any fsspec URL
(s3://bucket/run, ...): see solrl_core/storage.py for what changes on object stores.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path

from solrl_core.errors import RunDirLockedError
from solrl_core.stages.table import STAGES
from solrl_core.storage import Lease, as_path, is_remote, read_json, remove_tree, replace_dir, write_json_atomic

__all__ = ["STAGES", "RunDir", "read_json", "write_json_atomic"]


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

    def eval_dir(self, step: int) -> Path:
        """The held-out evaluation after `step` iterations (step 0 = the initial policy): solrl_core/evaluate.py."""
        return self.root / "eval" / f"step_{step:04d}"

    def evaluation(self, step: int) -> dict | None:
        """The finished evaluation after `step` iterations (its metrics.json record), None if there is none yet."""
        record = self.eval_dir(step) / "metrics.json"
        return read_json(record) if record.is_file() else None

    def evaluations(self) -> list[dict]:
        """The finished evaluations' metrics.json records, by step."""
        files = [p / "metrics.json" for p in self.root.glob("eval/step_[0-9]*")]
        return sorted((read_json(f) for f in files if f.is_file()), key=lambda e: e["step"])

    def checkpoint_dir(self, iteration: int) -> Path:
        """The policy state after `iteration`'s update; iteration -1 is the initial state."""
        return self.init_dir if iteration < 0 else self.stage_dir(iteration, "update") / "checkpoint"

    # ---- completion ---------------------------------------------------------------------------------------------
    def is_complete(self, iteration: int, stage: str) -> bool:
        return self.manifest_path(iteration, stage).is_file()

    def manifest(self, iteration: int, stage: str) -> dict:
        return read_json(self.manifest_path(iteration, stage))

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
        for path in (self.stage_dir(iteration, stage), self.partial_dir(iteration, stage)):
            remove_tree(path)

    @contextmanager
    def stage_output(self, iteration: int, stage: str, resume_partial: bool = False):
        """Yield the `.partial` directory to write into; on success move it into place (a rename locally, a copy of
        its objects on object stores).

        The caller writes the manifest after this block (see `complete`). With `resume_partial` an existing partial
        directory is kept (the stage resumes inside it); otherwise it is cleared first.
        """
        partial = self.partial_dir(iteration, stage)
        final = self.stage_dir(iteration, stage)
        if not resume_partial:
            remove_tree(partial)
        partial.mkdir(parents=True, exist_ok=True)
        yield partial
        replace_dir(partial, final)

    def complete(self, iteration: int, stage: str, summary: dict | None = None) -> dict:
        manifest = {"stage": stage, "iteration": iteration, "completed_at": time.time(), "summary": summary or {}}
        write_json_atomic(self.manifest_path(iteration, stage), manifest)
        return manifest

    # ---- ownership ----------------------------------------------------------------------------------------------
    @contextmanager
    def hold(self):
        """Hold the run directory exclusively (an OS file lock: released even when the process is killed; on object
        stores a lease object, see storage.Lease)."""
        if is_remote(self.root):  # no mkdir first: s3fs would create a missing bucket
            lease = Lease(self.root / ".lock")
            lease.acquire(str(self.root))
            try:
                yield self
            finally:
                lease.release()
            return
        self.root.mkdir(parents=True, exist_ok=True)
        lock_path = self.root / ".lock"
        fh = open(lock_path, "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise RunDirLockedError(
                f"run directory {self.root} is held by {holder}; wait for it to finish or use another --run-dir"
            ) from None
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(f"pid {os.getpid()}")
            fh.flush()
            yield self
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            fh.close()
