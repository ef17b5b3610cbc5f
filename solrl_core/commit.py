"""How a finished artifact directory takes the place of the one it replaces, so that an interrupt at any point leaves
either the old complete artifact or the new complete one (after `finish`, which the next holder of the run runs).

A commit is journaled in a small JSON record (`journal`), rewritten atomically at each step:

    phase "ready"   `partial` holds the finished new artifact; the record holds what marks it complete
    phase "aside"   the old artifact (if any) was moved from `final` to `aside`
    phase "in"      `final` holds the new artifact
    then            `mark(record)` (e.g. the stage manifest) is written, `aside` and the record are removed

From "ready" on the commit only goes forward: the old artifact is disposable, the new one is never touched before
the phase that follows its copy is recorded. Every step checks what is already done, so `finish` can be run again
from any crash point. Locally the moves are directory renames (atomic); on object stores a move is a copy of the
objects, and the new artifact's source objects are deleted only after phase "in" is recorded (a crash while they are
deleted never lets a second attempt copy a half-deleted source over the complete copy).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from solrl_core.storage import as_path, copy_tree, is_remote, read_json, remove_tree, replace_dir, write_json_atomic


def begin(journal, record: dict) -> None:
    """Record that `partial` is finished: from here on the commit goes forward (phase "ready")."""
    write_json_atomic(journal, {**record, "phase": "ready"})


def pending(journal) -> dict | None:
    """The journal record of a commit under way, None when there is none (a record without a phase only notes what
    an attempt started from: see RunDir.start_attempt)."""
    journal = as_path(journal)
    if not journal.is_file():
        return None
    record = read_json(journal)
    return record if "phase" in record else None


def finish(journal, partial, final, aside, mark: Callable[[dict], object] | None = None):
    """Carry the journaled commit to its end from whatever step it reached; return what `mark` returns."""
    journal, partial, final, aside = (as_path(p) for p in (journal, partial, final, aside))
    record = read_json(journal)
    if record["phase"] == "ready":
        if final.exists():
            replace_dir(final, aside)
        _advance(journal, record, "aside")
    if record["phase"] == "aside":
        if is_remote(partial):
            copy_tree(partial, final)  # the source stays until phase "in" is recorded
        elif partial.exists():
            os.replace(partial, final)  # absent: renamed already, by the attempt that stopped before recording it
        _advance(journal, record, "in")
    remove_tree(partial)
    result = mark(record) if mark is not None else None
    remove_tree(aside)
    journal.unlink(missing_ok=True)
    return result


def _advance(journal, record: dict, phase: str) -> None:
    record["phase"] = phase
    write_json_atomic(journal, record)
