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

A journal that is not such a record (not a JSON object, an unknown phase, a commit without the keys its mark
reads: garbled or edited) is refused in one line naming it (`read_journal`): what it journaled cannot be known, so
nothing is moved. Deleting it leaves either the old complete artifact or one its consumers refuse as damaged, and
re-running what it journaled rebuilds it (`journal_remedy`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from solrl_core.errors import DamagedArtifactError
from solrl_core.run.integrity import read_record
from solrl_core.run.storage import as_path, copy_tree, is_remote, remove_tree, replace_dir, write_json_atomic

PHASES = ("ready", "aside", "in")
SUFFIX = ".pending.json"


def journal_remedy(journal) -> str:
    """What to do with a damaged journal: delete it and re-run what it journaled, named from where the run directory
    keeps it (solrl_core/run/rundir.py: iter_NNNN/manifests/<stage>.pending.json, eval/step_NNNN.pending.json)."""
    journal = as_path(journal)
    name, folder = journal.name.removesuffix(SUFFIX), journal.parent
    if folder.name == "manifests" and folder.parent.name.startswith("iter_") and folder.parent.name[5:].isdigit():
        return (f"delete it and run: solrl stage {name} --run-dir {folder.parent.parent} --iteration "
                f"{int(folder.parent.name[5:])} --force")
    if folder.name == "eval" and name.startswith("step_") and name[5:].isdigit():
        return f"delete it and run: solrl eval --run-dir {folder.parent} --step {int(name[5:])}"
    return "delete it and run the stage or evaluation it journaled again"


def read_journal(journal, keys: tuple[str, ...] = ()) -> dict:
    """The record of `journal`: a JSON object whose phase, if any, is one of PHASES, and which has `keys` when it
    journals a commit (those its mark reads); else a one-line DamagedArtifactError naming it and what to do."""
    journal = as_path(journal)
    remedy = journal_remedy(journal)
    record = read_record(journal, str(journal), remedy)
    if "phase" in record:
        if record["phase"] not in PHASES:
            raise DamagedArtifactError(f"{journal} is damaged (unknown commit phase {str(record['phase'])[:40]!r}); "
                                       f"{remedy}")
        missing = [key for key in keys if key not in record]
        if missing:
            raise DamagedArtifactError(f"{journal} is damaged (a commit without {', '.join(missing)}); {remedy}")
    return record


def begin(journal, record: dict) -> None:
    """Record that `partial` is finished: from here on the commit goes forward (phase "ready")."""
    write_json_atomic(journal, {**record, "phase": "ready"})


def pending(journal, keys: tuple[str, ...] = ()) -> dict | None:
    """The journal record of a commit under way, None when there is none (a record without a phase only notes what
    an attempt started from: see RunDir.start_attempt); `keys` as in `read_journal`."""
    journal = as_path(journal)
    if not journal.is_file():
        return None
    record = read_journal(journal, keys)
    return record if "phase" in record else None


def finish(journal, partial, final, aside, mark: Callable[[dict], object] | None = None,
           keys: tuple[str, ...] = ()):
    """Carry the journaled commit to its end from whatever step it reached; return what `mark` returns (`keys`: what
    `mark` reads from the record)."""
    journal, partial, final, aside = (as_path(p) for p in (journal, partial, final, aside))
    record = read_journal(journal, keys)
    if "phase" not in record:
        raise DamagedArtifactError(f"{journal} is damaged (a commit without its phase); {journal_remedy(journal)}")
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
