"""What a producer wrote, checked by every consumer before it reads: file inventories of run-directory artifacts.

An inventory maps each file under an artifact directory (path relative to it, "/"-separated) to its size and a
blake2b digest of its content, streamed in 1 MiB blocks. It is computed once, when the artifact is complete, and
stored with the record that marks completion: a stage's manifest (key "files"), the initial adapters' state.json and
an evaluation's metrics.json (both written last in their directory, so they list the other files). A consumer
compares the files against it before reading; anything missing, of another size or with other content is a
`DamagedArtifactError` naming the file (relative to the run directory) and the command that rebuilds it.

Files added after completion are not checked (e.g. the MLflow "logged" marker in an evaluation directory). Records
written before inventories existed (runs started by older versions) have none: they are accepted unchecked.

Within one process a local file's digest is remembered under its identity and timestamps (device, inode, size,
mtime, ctime): the stages of an iteration verify the files the previous stage just hashed without reading them again
(any write, or a timestamp reset, changes mtime or ctime; another process hashes afresh).

The frozen config.yaml carries its own digest in its first line (`config_text` / `config_body`): a truncated or
garbled copy would otherwise still parse, as a different config.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from solrl_core.errors import DamagedArtifactError
from solrl_core.storage import as_path, is_remote

FILES_KEY = "files"  # where a completion record keeps its directory's inventory
BLOCK = 1 << 20
KNOWN_DIGESTS_MAX = 50_000  # remembered digests (a few MB); forgotten all at once beyond
_known_digests: dict[tuple[int, ...], str] = {}


def _digest(chunks) -> str:
    h = hashlib.blake2b(digest_size=16)
    for chunk in chunks:
        h.update(chunk)
    return h.hexdigest()


def _blocks(fh):
    while block := fh.read(BLOCK):
        yield block


def _listing(directory) -> dict[str, tuple[int, os.stat_result | None]]:
    """{relative path: (size, its stat; None on an object store)} of every file under `directory` (empty when it does
    not exist). Local trees are walked with os.scandir on plain strings, and the stat it returns finds a remembered
    digest: os.walk with pathlib and a second stat cost ≈0.1 s per check of one explore pool."""
    directory = as_path(directory)
    if is_remote(directory):
        fs, base = directory.fs, directory.path.rstrip("/")
        if not fs.exists(base):
            return {}
        found = fs.find(base, detail=True)
        return {key[len(base) + 1:]: (int(info["size"]), None) for key, info in found.items() if info["type"] == "file"}
    out: dict[str, tuple[int, os.stat_result | None]] = {}
    pending = [("", os.fspath(directory))]
    while pending:
        prefix, path = pending.pop()
        try:
            entries = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.is_dir():
                if not entry.is_symlink():  # as os.walk: a linked directory is not entered
                    pending.append((f"{prefix}{entry.name}/", entry.path))
            else:
                st = entry.stat()
                out[f"{prefix}{entry.name}"] = (st.st_size, st)
    return out


def _file_digest(directory, relative: str, st: os.stat_result | None = None) -> str:
    """The file's blake2b; a local file's `st` (its stat, when the caller has it) finds a remembered digest."""
    directory = as_path(directory)
    if is_remote(directory):
        with directory.fs.open(f"{directory.path.rstrip('/')}/{relative}", "rb") as fh:
            return _digest(_blocks(fh))
    path = os.path.join(os.fspath(directory), relative)
    known = _known_digests.get(file_identity(st if st is not None else os.stat(path)))
    if known is not None:
        return known
    with open(path, "rb") as fh:
        identity = file_identity(os.fstat(fh.fileno()))
        digest = _digest(_blocks(fh))
    if len(_known_digests) >= KNOWN_DIGESTS_MAX:
        _known_digests.clear()
    _known_digests[identity] = digest
    return digest


def file_identity(st: os.stat_result) -> tuple[int, ...]:
    """What changes whenever a local file is written or replaced: device, inode, size, mtime, ctime (the key under
    which this process remembers what it read from the file)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def inventory(directory) -> dict[str, dict[str, Any]]:
    """{relative path: {"size", "blake2b"}} of every file under `directory`."""
    return {rel: {"size": size, "blake2b": _file_digest(directory, rel, st)}
            for rel, (size, st) in sorted(_listing(directory).items())}


def damage(directory, recorded: dict[str, dict[str, Any]]) -> tuple[str, str] | None:
    """The first file under `directory` that differs from its `recorded` inventory, as (relative path, what is
    wrong); None when every recorded file is there with its size and content."""
    present = _listing(directory)
    for rel, expected in sorted(recorded.items()):
        if rel not in present:
            return rel, "missing"
        if present[rel][0] != expected["size"]:
            return rel, f"size {present[rel][0]} != recorded {expected['size']}"
    for rel, expected in sorted(recorded.items()):  # sizes first: a missing chunk is found without hashing
        if _file_digest(directory, rel, present[rel][1]) != expected["blake2b"]:
            return rel, "content changed since it was written"
    return None


def verify(directory, recorded: dict | None, name: str, remedy: str) -> None:
    """Refuse when a file under `directory` differs from `recorded` (an inventory; None: nothing recorded, nothing
    checked). `name` is how the user knows `directory` (relative to the run directory), `remedy` what to do."""
    if recorded is None:
        return
    found = damage(directory, recorded)
    if found is not None:
        rel, what = found
        raise DamagedArtifactError(f"{name}/{rel} is damaged ({what}); {remedy}")


def read_record(path, name: str, remedy: str) -> Any:
    """A JSON record of the run directory (manifest, state.json, metrics.json, run.json), or a one-line refusal
    naming it when it is not valid JSON (truncated, garbled)."""
    try:
        return json.loads(as_path(path).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedArtifactError(f"{name} is damaged (not valid JSON: {exc}); {remedy}") from None


# ---- the frozen config -------------------------------------------------------------------------------------------
CONFIG_MARK = "# solrl frozen config, blake2b of the lines below: "


def config_text(body: str) -> str:
    """The frozen config.yaml: a first comment line with the digest of `body`, then `body`."""
    return f"{CONFIG_MARK}{_digest([body.encode()])}\n{body}"


def config_body(text: str, name: str, remedy: str) -> str:
    """The YAML of a frozen config.yaml, refused when it no longer matches its digest. A file without the digest
    line (frozen by an older version, or written by hand) is taken as it is."""
    first, _, body = text.partition("\n")
    if not first.startswith(CONFIG_MARK):
        return text
    if first[len(CONFIG_MARK):].strip() != _digest([body.encode()]):
        raise DamagedArtifactError(f"{name} is damaged (content changed since the run froze it); {remedy}")
    return body


# ---- the run directory's artifacts (`run` is a solrl_core.rundir.RunDir) -----------------------------------------
def relative_name(run, path) -> str:
    """How a file or directory of the run is named in messages: relative to the run directory."""
    root, text = str(run.root).rstrip("/"), str(path)
    return text[len(root) + 1:] if text.startswith(root + "/") else text


def stage_remedy(run, iteration: int, stage: str) -> str:
    return f"rebuild it: solrl stage {stage} --run-dir {run.root} --iteration {iteration} --force"


def init_remedy(run) -> str:
    return (f"delete {run.init_dir} and run the command again: the initial adapters are recreated, identical, from "
            "the run seed")


def eval_remedy(run, step: int) -> str:
    return f"delete {run.eval_dir(step)} and run: solrl eval --run-dir {run.root} --step {step}"


def verify_stage(run, iteration: int, stage: str) -> None:
    """Refuse when the complete stage's manifest or a file of its artifact is damaged (nothing when incomplete)."""
    if run.is_complete(iteration, stage):
        recorded = run.manifest(iteration, stage).get(FILES_KEY)
        verify(run.stage_dir(iteration, stage), recorded, relative_name(run, run.stage_dir(iteration, stage)),
               stage_remedy(run, iteration, stage))


def verify_checkpoint(run, iteration: int) -> None:
    """The policy state after `iteration` (-1: the initial adapters, checked once written)."""
    if iteration >= 0:
        verify_stage(run, iteration, "update")
        return
    state = run.init_dir / "state.json"
    if state.is_file():
        recorded = read_record(state, relative_name(run, state), init_remedy(run)).get(FILES_KEY)
        verify(run.init_dir, recorded, relative_name(run, run.init_dir), init_remedy(run))


def evaluation_record(run, step: int) -> dict:
    """A finished evaluation's metrics.json, after checking the files it lists."""
    out = run.eval_dir(step)
    record = read_record(out / "metrics.json", relative_name(run, out / "metrics.json"), eval_remedy(run, step))
    verify(out, record.pop(FILES_KEY, None), relative_name(run, out), eval_remedy(run, step))
    return record
