"""What a producer wrote, checked by every consumer before it reads: file inventories of run-directory artifacts.

An inventory maps each file under an artifact directory (path relative to it, "/"-separated) to its size and a
blake2b digest of its content, streamed in 1 MiB blocks. It is computed once, when the artifact is complete, and
stored with the record that marks completion: a stage's manifest (key "files"), the initial adapters' state.json and
an evaluation's metrics.json (both written last in their directory, so they list the other files). A consumer
compares the files against it before reading; anything missing, of another size or with other content is a
`DamagedArtifactError` naming the file (relative to the run directory) and the command that rebuilds it.

Files added after completion are not checked (e.g. the MLflow "logged" marker in an evaluation directory). A record
without its inventory (or with one that is not a mapping of sizes and digests) is itself damage: nothing could be
checked against it, so it is refused like a damaged file, naming the record and the command that rebuilds it (runs
started before inventories existed are refused the same way, with that command).

A file that cannot be read as one (a symbolic link that loops or leads nowhere, a folder where a file was) is damage
too, named like a missing one. A record that carries its own digest (`sealed`) is checked against it whenever it is
read (`read_record`): nothing else lists the record itself.

Within one process a local file's digest is remembered under its identity and timestamps (device, inode, size,
mtime, ctime): the stages of an iteration verify the files the previous stage just hashed without reading them again
(any write, or a timestamp reset, changes mtime or ctime; another process hashes afresh).

The frozen config.yaml carries its own digest in its first line (`config_text` / `config_body`): a truncated or
garbled copy would otherwise still parse, as a different config. One without that line is taken as it is (frozen by
an older version, or a whole config written out), unless it extends another: a user's own config, refused as such.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from typing import Any

from solrl_core.errors import DamagedArtifactError, SolrlError
from solrl_core.run.storage import as_path, is_remote

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


def _listing(directory) -> dict[str, tuple[int, os.stat_result | None | OSError]]:
    """{relative path: (size, its stat; None on an object store)} of every file under `directory` (empty when it does
    not exist). An entry that cannot be stat'ed (a link that loops or leads nowhere) is listed with size -1 and the
    OSError in place of its stat. Local trees are walked with os.scandir on plain strings, and the stat it returns
    finds a remembered digest: os.walk with pathlib and a second stat cost ≈0.1 s per check of one explore pool."""
    directory = as_path(directory)
    if is_remote(directory):
        fs, base = directory.fs, directory.path.rstrip("/")
        if not fs.exists(base):
            return {}
        found = fs.find(base, detail=True)
        return {key[len(base) + 1:]: (int(info["size"]), None) for key, info in found.items() if info["type"] == "file"}
    out: dict[str, tuple[int, os.stat_result | None | OSError]] = {}
    pending = [("", os.fspath(directory))]
    while pending:
        prefix, path = pending.pop()
        try:
            entries = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            try:
                if entry.is_dir():
                    if not entry.is_symlink():  # as os.walk: a linked directory is not entered
                        pending.append((f"{prefix}{entry.name}/", entry.path))
                    continue
                st = entry.stat()
            except OSError as exc:  # a symbolic link that loops (ELOOP) or whose target is gone (ENOENT)
                out[f"{prefix}{entry.name}"] = (-1, exc)
                continue
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
    """{relative path: {"size", "blake2b"}} of every file under `directory` (an entry that is no readable file raises
    its OSError)."""
    out = {}
    for rel, (size, st) in sorted(_listing(directory).items()):
        if isinstance(st, OSError):
            raise st
        out[rel] = {"size": size, "blake2b": _file_digest(directory, rel, st)}
    return out


def damage(directory, recorded: dict[str, dict[str, Any]], contents: bool = True) -> tuple[str, str] | None:
    """The first file under `directory` that differs from its `recorded` inventory, as (relative path, what is
    wrong); None when every recorded file is there with its size and content (without `contents`: its size only, no
    file read)."""
    present = _listing(directory)
    for rel, expected in sorted(recorded.items()):
        if rel not in present:
            return rel, "missing"
        if isinstance(present[rel][1], OSError):
            return rel, f"not a readable file: {present[rel][1].strerror or present[rel][1]}"
        if present[rel][0] != expected["size"]:
            return rel, f"size {present[rel][0]} != recorded {expected['size']}"
    if not contents:
        return None
    for rel, expected in sorted(recorded.items()):  # sizes first: a missing chunk is found without hashing
        if _file_digest(directory, rel, present[rel][1]) != expected["blake2b"]:
            return rel, "content changed since it was written"
    return None


def verify(directory, recorded: dict, name: str, remedy: str, contents: bool = True) -> None:
    """Refuse when a file under `directory` differs from `recorded` (an inventory, see `recorded_files`; without
    `contents`, in presence and size only). `name` is how the user knows `directory` (relative to the run directory),
    `remedy` what to do."""
    found = damage(directory, recorded, contents)
    if found is not None:
        rel, what = found
        raise DamagedArtifactError(f"{name}/{rel} is damaged ({what}); {remedy}")


def recorded_files(record: dict, name: str, remedy: str) -> dict[str, dict[str, Any]]:
    """The inventory a completion record (`name`, relative to the run directory) lists under FILES_KEY; a record
    without one, or with one that is not {path: {"size": int, "blake2b": str}}, is damaged: its files cannot be
    checked."""
    files = record.get(FILES_KEY)
    if files is None:
        raise DamagedArtifactError(f"{name} is damaged (it has no '{FILES_KEY}' inventory, so the files it completes "
                                   f"cannot be checked); {remedy}")
    if not isinstance(files, dict) or not all(
            isinstance(entry, dict) and type(entry.get("size")) is int and isinstance(entry.get("blake2b"), str)
            for entry in files.values()):
        raise DamagedArtifactError(f"{name} is damaged (its '{FILES_KEY}' inventory is not a list of file sizes and "
                                   f"digests); {remedy}")
    return files


def read_record(path, name: str, remedy: str) -> dict:
    """A JSON record of the run directory (manifest, state.json, metrics.json, run.json), or a one-line refusal
    naming it when it is not a valid JSON object (truncated, garbled, edited into something else) or cannot be read
    as a file (a folder in its place, a link that loops)."""
    try:
        record = json.loads(as_path(path).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedArtifactError(f"{name} is damaged (not valid JSON: {exc}); {remedy}") from None
    except (IsADirectoryError, NotADirectoryError) as exc:
        raise DamagedArtifactError(f"{name} is damaged (not a file: {exc.strerror}); {remedy}") from None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise DamagedArtifactError(f"{name} is damaged (a symbolic link that loops); {remedy}") from None
    if not isinstance(record, dict):
        raise DamagedArtifactError(f"{name} is damaged (a JSON {type(record).__name__}, not an object); {remedy}")
    if SEAL_KEY in record and record.pop(SEAL_KEY) != _record_digest(record):
        raise DamagedArtifactError(f"{name} is damaged (its content changed since it was written); {remedy}")
    return record


# A record's own digest (key SEAL_KEY, see `sealed`): a completion record lists the files of its directory, but
# nothing lists the record itself, so an edited value in it (an evaluation's metrics) would be read as written.
SEAL_KEY = "record_blake2b"


def _record_digest(record: dict) -> str:
    return _digest([json.dumps(record, sort_keys=True, separators=(",", ":")).encode()])


def sealed(record: dict) -> dict:
    """`record` with its own digest under SEAL_KEY, which `read_record` checks (and drops) when it reads it back. An
    evaluation's metrics.json is written sealed (nothing else lists it, and its values are shown as measured); stage
    manifests and state.json are not yet."""
    return {**record, SEAL_KEY: _record_digest(record)}


# ---- the frozen config -------------------------------------------------------------------------------------------
CONFIG_MARK = "# solrl frozen config, blake2b of the lines below: "


def config_text(body: str) -> str:
    """The frozen config.yaml: a first comment line with the digest of `body`, then `body`."""
    return f"{CONFIG_MARK}{_digest([body.encode()])}\n{body}"


# A top-level `extends:` key: what a user's config has, and a frozen config never (it is resolved).
_EXTENDS = re.compile(r"^extends[ \t]*:", re.MULTILINE)


def config_body(text: str, name: str, remedy: str) -> str:
    """The YAML of a frozen config.yaml (`name`: its path), refused when it no longer matches its digest. A file
    without the digest line (frozen by an older version, or a whole config written by hand) is taken as it is, unless
    it is a config that `extends` another: a user's own config, not one solrl froze."""
    first, _, body = text.partition("\n")
    if not first.startswith(CONFIG_MARK):
        if is_foreign_config(text):
            raise SolrlError(foreign_config_message(name))
        return text
    if first[len(CONFIG_MARK):].strip() != _digest([body.encode()]):
        raise DamagedArtifactError(f"{name} is damaged (content changed since the run froze it); {remedy}")
    return body


def is_foreign_config(text: str) -> bool:
    """Whether the text of a run directory's config.yaml is a user's own config rather than one solrl froze: no digest
    line, and an `extends` (a frozen config is resolved)."""
    return not text.startswith(CONFIG_MARK) and _EXTENDS.search(text) is not None


def foreign_config_message(name: str) -> str:
    """Why a config.yaml of the user's own (its path `name`) in a run directory is refused: solrl freezes the run's
    resolved config there, first line a digest, and must not overwrite the user's file."""
    run = os.path.dirname(name) or "."
    return (f"{name} is not a config solrl froze (no digest line, and it extends another config): a run directory's "
            f"config.yaml is where solrl keeps the run's resolved config; move yours out of the run directory (e.g. "
            f"mv {name} my_config.yaml) and run: solrl train my_config.yaml --run-dir {run}")


# ---- the run directory's artifacts (`run` is a solrl_core.run.rundir.RunDir) -----------------------------------------
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


def verify_stage(run, iteration: int, stage: str, contents: bool = True) -> None:
    """Refuse when the complete stage's manifest or a file of its artifact is damaged (nothing when incomplete);
    without `contents`, files are checked for presence and size only (a stat each, nothing read)."""
    if run.is_complete(iteration, stage):
        remedy = stage_remedy(run, iteration, stage)
        recorded = recorded_files(run.manifest(iteration, stage),
                                  relative_name(run, run.manifest_path(iteration, stage)), remedy)
        verify(run.stage_dir(iteration, stage), recorded, relative_name(run, run.stage_dir(iteration, stage)), remedy,
               contents)


def verify_checkpoint(run, iteration: int) -> None:
    """The policy state after `iteration` (-1: the initial adapters, checked once written)."""
    if iteration >= 0:
        verify_stage(run, iteration, "update")
        return
    state = run.init_dir / "state.json"
    if state.is_file():
        name = relative_name(run, state)
        recorded = recorded_files(read_record(state, name, init_remedy(run)), name, init_remedy(run))
        verify(run.init_dir, recorded, relative_name(run, run.init_dir), init_remedy(run))


def evaluation_record(run, step: int) -> dict:
    """A finished evaluation's metrics.json, after checking the files it lists."""
    out, remedy = run.eval_dir(step), eval_remedy(run, step)
    name = relative_name(run, out / "metrics.json")
    record = read_record(out / "metrics.json", name, remedy)
    verify(out, recorded_files(record, name, remedy), relative_name(run, out), remedy)
    record.pop(FILES_KEY)
    return record
