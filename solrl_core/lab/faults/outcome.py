"""How a case ended: the classifier, the repair an error names, what was lost, and the comparison with the reference.

Outcomes (worst first, the first that applies wins):
    lost       a file of the run that existed before a failed command is gone or changed
    orphan     a process of the command was still alive after it ended
    hang       the command ran past the case's time limit
    traceback  a Python traceback on the terminal
    silent     exit 0 where a failure was due, or a run that finished with results other than the reference's
    unclear    exit non-zero, but the last line is not a one-line "solrl: error: ..." (nor "solrl: ..." after a signal)
    unrepaired a one-line error, but the repair it names is missing or does not bring the run back
    clean      the one-line error that was due (after repair, when the case repairs, the run equals the reference)
    ok         a success that was due, ending equal to the reference
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from pathlib import Path

OUTCOMES = ("clean", "ok", "traceback", "silent", "lost", "orphan", "hang", "unclear", "unrepaired")
ERROR_PREFIX = "solrl: error:"
IGNORED = (".lock",)  # rewritten by every command that holds the run


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def first_outcome(expect: str, finished, lost: list[str]) -> str:
    """The outcome of a case's first command (`finished`: procs.Finished), before any repair."""
    if lost:
        return "lost"
    if finished.orphans:
        return "orphan"
    if finished.timed_out:
        return "hang"
    if "Traceback (most recent call last)" in finished.stderr + finished.stdout:
        return "traceback"
    line = last_line(finished.stderr)
    if expect == "interrupt":
        if finished.signalled is None:  # it ended before the signal could be sent: judged as a success
            return "ok" if finished.returncode == 0 else "unclear"
        if finished.returncode == 0:
            return "silent"
        killed = finished.signalled.startswith("SIGKILL")
        return "clean" if killed or line.startswith("solrl:") else "unclear"
    if finished.returncode == 0:
        return "silent" if expect == "error" else "ok"
    return "clean" if line.startswith(ERROR_PREFIX) else "unclear"


# ---- the repair an error names ------------------------------------------------------------------------------------
_COMMAND = re.compile(r"\bsolrl\s+((?:stage|train|eval|status|inspect)\b[^;()]*)")
_DELETE = re.compile(r"\b(?:delete|remove)\s+(/\S+)")
_DELETE_IT = re.compile(r"\b(?:delete|remove) it\b")  # "it": the first absolute path of the message
_FIRST_PATH = re.compile(r"(?<![\w:/])(/[^\s;,()]+)")
_MOVE_OUT = re.compile(r"(\S+) in run directory (/\S+) is [^;]*; move it out of the run directory")
_MV = re.compile(r"\bmv\s+(/\S+)\s+([^\s)]+)")  # "mv SOURCE DEST": DEST relative to the command's folder
_AGAIN = re.compile(r"\brun (?:the|this) (?:same )?command again\b")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$")


def repair_steps(message: str, config: str) -> list[tuple[str, object]]:
    """The steps the error message tells the user to take, in order: ("delete", path) (also "PATH ...; delete it"),
    ("move", path) for "NAME in run directory ROOT is ...; move it out of the run directory", ("mv", (source, dest))
    for "mv SOURCE DEST", ("solrl", [args]) and ("again", None) for "run the command again". Placeholders in capitals
    (CONFIG, THAT_CONFIG) stand for `config`."""
    found: list[tuple[int, tuple[str, object]]] = []
    for m in _DELETE.finditer(message):
        found.append((m.start(), ("delete", m.group(1).rstrip(".,;:)"))))
    for m in _DELETE_IT.finditer(message):
        subject = _FIRST_PATH.search(message, 0, m.start())
        if subject:
            found.append((m.start(), ("delete", subject.group(1).rstrip(".,;:)"))))
    for m in _MOVE_OUT.finditer(message):
        found.append((m.start(), ("move", f"{m.group(2)}/{m.group(1)}")))
    for m in _MV.finditer(message):
        found.append((m.start(), ("mv", (m.group(1), m.group(2).rstrip(".,;:")))))
    for m in _COMMAND.finditer(message):
        text = re.split(r"\s+(?:and|then|or)\s+", m.group(1))[0].strip().rstrip(".,:")
        args = [config if _PLACEHOLDER.match(tok) else tok for tok in shlex.split(text)]
        found.append((m.start(), ("solrl", args)))
    for m in _AGAIN.finditer(message):
        found.append((m.start(), ("again", None)))
    return [step for _, step in sorted(found, key=lambda pair: pair[0])]


def inside(path: Path, folder: Path) -> bool:
    """Whether `path` is `folder` or under it, links followed (a link that loops counts as where it is)."""
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
        return True
    except ValueError:
        return False


# ---- what was lost ------------------------------------------------------------------------------------------------
def evaluations(files: dict[str, str]) -> list[str]:
    """The evaluations' metrics.json among a snapshot's files."""
    return [rel for rel in files if rel.startswith("eval/") and rel.endswith("/metrics.json")]


def snapshot(run_dir: Path) -> dict[str, str]:
    """{run-relative path: blake2b digest} of every file of the run."""
    if not run_dir.is_dir():
        return {}
    out = {}
    for path in sorted(run_dir.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[path.relative_to(run_dir).as_posix()] = hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
    return out


def lost_files(before: dict[str, str], after: dict[str, str], damaged: set[str]) -> list[str]:
    """Files present `before` that are gone or changed `after`, but for the ones damaged on purpose."""
    return [rel for rel, digest in before.items()
            if rel not in IGNORED and rel not in damaged and after.get(rel) != digest]


# ---- equal to the reference ---------------------------------------------------------------------------------------
def _tensors(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def differences(reference: Path, run_dir: Path, iterations: int, evaluations: list[str]) -> list[str]:
    """How `run_dir` differs from the `reference` run (empty when equal): the final checkpoint's tensors, and the
    metrics of `evaluations` (run-relative metrics.json paths: those the case's run had before its commands)."""
    import json

    import torch

    out = []
    rel = Path(f"iter_{iterations - 1:04d}") / "update" / "checkpoint"
    for ref_file in sorted((reference / rel).glob("*.safetensors")):
        mine = run_dir / rel / ref_file.name
        if not mine.is_file():
            out.append(f"{rel / ref_file.name} missing")
            continue
        try:
            a, b = _tensors(ref_file), _tensors(mine)
        except Exception as exc:  # noqa: BLE001 - a damaged file is a difference, whatever the reader raises
            out.append(f"{rel / ref_file.name} unreadable ({type(exc).__name__})")
            continue
        if a.keys() != b.keys() or not all(torch.equal(a[k], b[k]) for k in a):
            out.append(f"{rel / ref_file.name} differs")
    for rel_metrics in evaluations:
        ref_metrics, mine = reference / rel_metrics, run_dir / rel_metrics
        try:
            same = json.loads(mine.read_text())["metrics"] == json.loads(ref_metrics.read_text())["metrics"]
        except (OSError, ValueError, KeyError):
            same = False
        if not same:
            out.append(f"{rel_metrics} differs or is missing")
    return out
