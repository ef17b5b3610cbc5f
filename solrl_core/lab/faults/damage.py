"""The faults a case applies to its own copy of the reference run (or next to it), named by the catalogue.

Each fault is `(name, {arguments})`; `apply(step, case_dir, run_dir)` performs it and returns the run-relative paths
it touched on purpose (those are not counted as lost). Paths in arguments are relative to the run directory unless
they start with "{case}/" (the case's own folder, for bad input files). A path with a glob picks the first file it
matches, in sorted order, so "iter_0001/explore/pool.zarr/image/c.*" is one chunk of the explore pool's images.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from solrl_core.run.stage_table import STAGES


def resolve(spec: str, case_dir: Path, run_dir: Path) -> Path:
    """The file (or directory) a fault argument names; globs pick the first matching file."""
    base, rel = (case_dir, spec[len("{case}/"):]) if spec.startswith("{case}/") else (run_dir, spec)
    if not any(ch in rel for ch in "*?["):
        return base / rel
    found = sorted(p for p in base.glob(rel) if p.is_file())
    if not found:
        raise FileNotFoundError(f"no file matches {rel} under {base}")
    return found[0]


def truncate(path: Path) -> None:
    """Keep the first half of the file (a write cut short)."""
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)


def flip(path: Path, count: int = 8) -> None:
    """Invert `count` bytes in the middle of the file (same size, other content: a bit rot)."""
    data = bytearray(path.read_bytes())
    start = max(0, len(data) // 2 - count // 2)
    for i in range(start, min(len(data), start + count)):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def delete(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def interrupt(run_dir: Path, iteration: int, done: str | None) -> list[Path]:
    """Make the run look stopped inside `iteration`: its stages after `done` (all of them when None), everything of
    the later iterations and the evaluations that need them are removed, as if they had never run."""
    kept = STAGES[: STAGES.index(done) + 1] if done else ()
    removed = []
    it_dir = run_dir / f"iter_{iteration:04d}"
    for stage in STAGES:
        if stage in kept:
            continue
        removed += [it_dir / stage, it_dir / f"{stage}.partial", it_dir / "manifests" / f"{stage}.json"]
    removed += [it_dir / "best_worst.png", it_dir / "manifests" / "logged.json"]
    if not kept:
        removed.append(it_dir)
    removed += [p for p in run_dir.glob("iter_[0-9][0-9][0-9][0-9]") if int(p.name[5:]) > iteration]
    removed += [p for p in run_dir.glob("eval/step_[0-9]*") if int(p.name[5:]) > iteration]
    for path in removed:
        if path.exists():
            delete(path)
    return removed


def write(path: Path, text: str | None = None, data: bytes | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if data is not None else text.encode())


def read_only(path: Path) -> None:
    """Take write permission away from `path` and everything under it (the command then runs without the
    capability that lets root ignore it: procs.unprivileged); `undo_permissions` gives it back."""
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def replace_with_dir(path: Path) -> None:
    """An empty directory where the file (or directory) `path` was."""
    if path.exists() or path.is_symlink():
        delete(path)
    path.mkdir(parents=True)


def replace_with_file(path: Path) -> None:
    """A small text file where the directory (or file) `path` was."""
    if path.exists() or path.is_symlink():
        delete(path)
    path.write_text("not what solrl wrote here\n")


def symlink_loop(path: Path) -> None:
    """`path` (a file) replaced by a symbolic link to itself: opening it fails with ELOOP, never ends in data."""
    delete(path)
    path.symlink_to(path.name)


def edit_json(path: Path, drop: str | None = None, changes: dict | None = None) -> None:
    """Remove the top-level key `drop` and/or set `changes` ({"dotted.key": value}) in a JSON file, as a user's
    editor would (valid JSON, other content kept)."""
    data = json.loads(path.read_text())
    if drop is not None:
        del data[drop]
    for dotted, value in (changes or {}).items():
        *parents, key = dotted.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[key] = value
    path.write_text(json.dumps(data, indent=2, sort_keys=True))


def own_store(run_dir: Path, case_dir: Path) -> list[Path]:
    """Give the case's run an MLflow store of its own: the sqlite file its run.json names (the reference's, shared
    by every case) copied to `case_dir`/mlruns.db and run.json pointed at it, so the case may damage it."""
    run_json = run_dir / "run.json"
    info = json.loads(run_json.read_text())
    prefix = "sqlite:///"
    if not info["tracking_uri"].startswith(prefix):
        raise ValueError(f"own_store needs a sqlite store, not {info['tracking_uri']}")
    source = Path(info["tracking_uri"][len(prefix):])
    store = case_dir / "mlruns.db"
    shutil.copy2(source, store)
    info["tracking_uri"] = f"{prefix}{store}"
    run_json.write_text(json.dumps(info, indent=2, sort_keys=True))
    return [run_json, store]


_DELETE_RUN = "import sys, mlflow; mlflow.MlflowClient(sys.argv[1]).delete_run(sys.argv[2])"


def delete_mlflow_run(run_dir: Path) -> list[Path]:
    """Delete the run's MLflow run in its store, as `mlflow runs delete` or the UI does (MLflow runs in a process of
    its own: solrl_core imports no MLflow)."""
    info = json.loads((run_dir / "run.json").read_text())
    subprocess.run([sys.executable, "-c", _DELETE_RUN, info["tracking_uri"], info["mlflow_run_id"]], check=True,
                   capture_output=True, timeout=120)
    return []


def apply(step: tuple[str, dict], case_dir: Path, run_dir: Path, values: dict[str, str]) -> list[Path]:
    """Perform one fault; return the paths it changed on purpose. `values` fill "{name}" fields of text to write."""
    name, args = step
    if name == "interrupt":
        return interrupt(run_dir, args["iteration"], args.get("done"))
    if name == "own_store":
        return own_store(run_dir, case_dir)
    if name == "delete_mlflow_run":
        return delete_mlflow_run(run_dir)
    path = resolve(args["path"], case_dir, run_dir)
    if name == "write":
        text = args.get("text")
        write(path, text.format(**values) if text is not None else None, args.get("data"))
    elif name == "mkdir":
        path.mkdir(parents=True, exist_ok=True)
    elif name == "symlink":  # a link to `target` (a "{case}/" or run-relative path; it need not exist)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(resolve(args["target"], case_dir, run_dir))
    elif name == "fifo":
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
    elif name == "edit_json":
        edit_json(path, args.get("drop"), args.get("set"))
    else:
        action = {"truncate": truncate, "flip": flip, "delete": delete, "read_only": read_only,
                  "replace_with_dir": replace_with_dir, "replace_with_file": replace_with_file,
                  "symlink_loop": symlink_loop}[name]
        action(path)
    return [path]


def undo_permissions(case_dir: Path) -> None:
    """Give write permission back everywhere under the case (after a read_only fault)."""
    for parent, dirs, files in os.walk(case_dir):
        for name in [*dirs, *files]:
            p = Path(parent) / name
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
    case_dir.chmod(case_dir.stat().st_mode | stat.S_IWUSR)
