"""The faults a case applies to its own copy of the reference run (or next to it), named by the catalogue.

Each fault is `(name, {arguments})`; `apply(step, case_dir, run_dir)` performs it and returns the run-relative paths
it touched on purpose (those are not counted as lost). Paths in arguments are relative to the run directory unless
they start with "{case}/" (the case's own folder, for bad input files). A path with a glob picks the first file it
matches, in sorted order, so "iter_0001/explore/pool.zarr/image/c.*" is one chunk of the explore pool's images.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from solrl_core.stages.table import STAGES


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


def apply(step: tuple[str, dict], case_dir: Path, run_dir: Path, values: dict[str, str]) -> list[Path]:
    """Perform one fault; return the paths it changed on purpose. `values` fill "{name}" fields of text to write."""
    name, args = step
    if name == "interrupt":
        return interrupt(run_dir, args["iteration"], args.get("done"))
    if name == "write":
        path = resolve(args["path"], case_dir, run_dir)
        text = args.get("text")
        write(path, text.format(**values) if text is not None else None, args.get("data"))
        return [path]
    if name == "mkdir":
        path = resolve(args["path"], case_dir, run_dir)
        path.mkdir(parents=True, exist_ok=True)
        return [path]
    path = resolve(args["path"], case_dir, run_dir)
    action = {"truncate": truncate, "flip": flip, "delete": delete, "read_only": read_only}[name]
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
