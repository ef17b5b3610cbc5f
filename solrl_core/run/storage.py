"""Where a run's artifacts are stored: a local directory, or any fsspec URL (s3://, gs://, memory://, ...).

A local run directory is a `pathlib.Path` and every helper here does exactly what the code did before (temporary
file + `os.replace`, `shutil.rmtree`, directory rename, an fcntl lock). A URL becomes a `upath.UPath` (the pathlib
API over fsspec), and the helpers follow the rules of object stores instead:

- one object is written by one request (a PUT), so a JSON file or a safetensors file is either absent or whole;
  nothing is written to a temporary name first;
- a "directory" is a key prefix; it is moved by copying its objects and deleting the originals (not atomic), which
  is why a stage's completion is decided by its manifest alone, written after its artifact is in place;
- zarr pools use zarr's own fsspec store;
- the run's lock is an advisory lease object (see `Lease`).

Credentials and endpoints come from fsspec's usual configuration, e.g. for s3:// the AWS variables that botocore
reads (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL or AWS_ENDPOINT_URL_S3 for
an S3-compatible server) or fsspec's config (FSSPEC_S3_ENDPOINT_URL=..., FSSPEC_S3='{"key": ...}', or a JSON file
in ~/.config/fsspec/).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from solrl_core.errors import RunDirLockedError, SolrlError

LOCAL_PROTOCOLS = ("", "file", "local")


def as_path(location):
    """A local `Path` for a local path (or file:// URL), a `UPath` for any other fsspec URL."""
    if isinstance(location, Path):
        return location
    if not isinstance(location, str) and hasattr(location, "protocol"):  # already a UPath
        return Path(location.path) if location.protocol in LOCAL_PROTOCOLS else location
    text = str(location)
    if "://" not in text:
        return Path(text)
    if text.startswith(("file://", "local://")):
        return Path(text.split("://", 1)[1])
    from upath import UPath

    try:
        # no listings cache: other processes (stage workers, torchrun ranks) and zarr's own store write here too
        return UPath(text, use_listings_cache=False)
    except (ImportError, ValueError) as exc:  # an unknown protocol, or its fsspec package is not installed
        raise SolrlError(f"cannot open run directory {text}: {exc} (install the fsspec package for this URL, e.g. "
                         "pip install 'solrl[s3]' for s3://)") from None


def is_remote(path) -> bool:
    return not isinstance(path, Path)


def location(path) -> str:
    """How a path is named to the user and to other processes (a URL for remote paths); resolved when local."""
    return str(path.resolve()) if isinstance(path, Path) else str(path)


# ---- access -------------------------------------------------------------------------------------------------------
# what to set when an object store refuses: by fsspec protocol (the variables its client reads); others: fsspec config
CREDENTIAL_SETTINGS = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), and AWS_ENDPOINT_URL for an S3-compatible "
          "server",
    "gs": "GOOGLE_APPLICATION_CREDENTIALS (or run: gcloud auth application-default login)",
    "az": "AZURE_STORAGE_CONNECTION_STRING (or AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY)",
}
CREDENTIAL_SETTINGS |= {"s3a": CREDENTIAL_SETTINGS["s3"], "gcs": CREDENTIAL_SETTINGS["gs"],
                        "abfs": CREDENTIAL_SETTINGS["az"], "adl": CREDENTIAL_SETTINGS["az"]}
OTHER_STORE_SETTINGS = "the credentials of its fsspec filesystem (FSSPEC_<PROTOCOL>='{...}' or ~/.config/fsspec/)"


def check_remote_access(path, setting: str = "--run-dir") -> None:
    """One request to the object store of a run directory at an fsspec URL (is `path` there?), so that missing or
    refused credentials, or a store that does not answer, end in one SolrlError naming `path` and what to set (see
    `access_failure`) before any work; nothing for a local path. An absent `path` is fine (a new run)."""
    path = as_path(path)
    if not is_remote(path):
        return
    try:
        path.fs.info(path.path)
    except FileNotFoundError:
        return
    except Exception as exc:  # noqa: BLE001 - each fsspec client raises its own classes: `access_failure` sorts them
        why = access_failure(exc)
        if why is None:
            raise
        protocol = str(path).split("://", 1)[0]
        raise SolrlError(f"{setting} {path}: {why}; set {CREDENTIAL_SETTINGS.get(protocol, OTHER_STORE_SETTINGS)}"
                         ) from None


def access_failure(exc: BaseException) -> str | None:
    """Why an object store refused a request, in words, when `exc` (or what it wraps) says so: no credentials
    (botocore's NoCredentialsError, google-auth's DefaultCredentialsError, ...), refused ones (PermissionError, as
    s3fs translates AccessDenied / InvalidAccessKeyId / SignatureDoesNotMatch), no answer (a connection error);
    None for anything else."""
    chain, seen = [], exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for error in chain:
        name = type(error).__name__
        if "Credentials" in name or "NoAuth" in name:
            return f"no credentials for the store ({name}: {_first_line(error)})"
        if isinstance(error, PermissionError):
            return f"the store refused the credentials or the access ({_first_line(error)})"
        if isinstance(error, (ConnectionError, TimeoutError)) or name.startswith(("EndpointConnection", "Connect")):
            return f"the store does not answer ({_first_line(error)})"
    return None


def _first_line(error: BaseException, chars: int = 200) -> str:
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return text if len(text) <= chars else text[: chars - 3] + "..."


# ---- whole files ------------------------------------------------------------------------------------------------
def write_json_atomic(path, data: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never a torn one."""
    path = as_path(path)
    text = json.dumps(data, indent=2, sort_keys=True)
    if is_remote(path):
        path.write_text(text)  # one PUT: atomic per object
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_json(path) -> Any:
    return json.loads(as_path(path).read_text())


def write_text_atomic(path, text: str) -> None:
    path = as_path(path)
    if is_remote(path):
        path.write_text(text)
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def save_tensors(tensors: dict, path, metadata: dict[str, str] | None = None) -> None:
    """safetensors file at `path` (whole-object write on object stores; locally written in place as before)."""
    from safetensors.torch import save, save_file

    path = as_path(path)
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    if is_remote(path):
        path.write_bytes(save(tensors, metadata=metadata))
        return
    try:
        save_file(tensors, str(path), metadata=metadata)
    except Exception as exc:  # safetensors reports a failed write as SafetensorError("... (os error 28)")
        code = re.search(r"\(os error (\d+)\)", str(exc))
        if code is None:
            raise
        number = int(code.group(1))
        raise OSError(number, os.strerror(number), str(path)) from exc


def load_tensors(path) -> dict:
    from safetensors.torch import load, load_file

    path = as_path(path)
    if is_remote(path):
        return load(path.read_bytes())
    return load_file(str(path))


def load_tensors_with_metadata(path) -> tuple[dict, dict[str, str]]:
    """Tensors and the file's string metadata (safetensors format: 8-byte little-endian header size, JSON header)."""
    from safetensors.torch import load

    path = as_path(path)
    if not is_remote(path):
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    return load(data), dict(header.get("__metadata__") or {})


@contextmanager
def local_file(path):
    """A local file with the content of `path` (the path itself when local; a temporary copy of the same name for a
    URL), for libraries that only read local files (e.g. mlflow.log_artifact)."""
    path = as_path(path)
    if not is_remote(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="solrl-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_bytes(path.read_bytes())
        yield copy


def save_image(image, path) -> None:
    """A PNG (PIL image) at `path`."""
    path = as_path(path)
    if is_remote(path):
        with path.open("wb") as fh:
            image.save(fh, format="PNG")
    else:
        image.save(path)


# ---- directories --------------------------------------------------------------------------------------------------
def remove_tree(path) -> None:
    """Delete a directory and everything under it (nothing when absent)."""
    path = as_path(path)
    if not path.exists():
        return
    if not is_remote(path):
        shutil.rmtree(path)
    else:
        path.fs.rm(path.path, recursive=True)
        path.fs.invalidate_cache(path.path)


def replace_dir(src, dst) -> None:
    """Put directory `src` at `dst` (replacing it): a rename locally. On object stores: a copy of every object under
    `src` to `dst`, JSON objects last (zarr metadata, state.json, metrics.json: whoever reads one of them finds the
    data it describes already there), then the deletion of `src`. Not atomic: the run decides a stage's completion
    by its manifest, written after this."""
    src, dst = as_path(src), as_path(dst)
    if not is_remote(src):
        if dst.exists():
            shutil.rmtree(dst)
        os.replace(src, dst)
        return
    copy_tree(src, dst)
    remove_tree(src)


def copy_tree(src, dst) -> None:
    """Make `dst` a copy of directory `src` on an object store (its objects copied server-side, JSON objects last;
    `dst` removed first); `src` stays as it is."""
    src, dst = as_path(src), as_path(dst)
    remove_tree(dst)
    fs = src.fs
    source, target = src.path.rstrip("/"), dst.path.rstrip("/")
    keys = fs.find(source)
    for batch in ([k for k in keys if not k.endswith(".json")], [k for k in keys if k.endswith(".json")]):
        if batch:  # server-side copies, issued concurrently by async filesystems (s3fs, gcsfs)
            fs.copy(batch, [target + k[len(source) :] for k in batch])
    fs.invalidate_cache(target)


def zarr_store(path, read_only: bool = False):
    """What `zarr.open_group` takes for `path`: the path itself locally, zarr's fsspec store for a URL."""
    path = as_path(path)
    if not is_remote(path):
        return path
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
    from zarr.storage import FsspecStore

    # the path's own filesystem instance, wrapped for zarr's async API: one connection pool per process, closed at
    # exit (an async s3fs instance of zarr's making would leave its HTTP session open)
    fs = AsyncFileSystemWrapper(path.fs, asynchronous=True)
    return FsspecStore(fs=fs, path=path.path.rstrip("/"), read_only=read_only)


# ---- the run lock ---------------------------------------------------------------------------------------------------
LEASE_SECONDS = 60.0  # a lease whose heartbeat is older than this is abandoned (its holder died)
LOCK_WAIT_ENV = "SOLRL_LOCK_WAIT"  # seconds a stage run waits for a run directory another command holds
LOCK_WAIT_SECONDS = 600.0  # ... when neither that variable nor --lock-wait says
LOCK_POLL_SECONDS = 0.5


def lock_wait_seconds(seconds: float | None = None) -> float:
    """How long a stage run waits for the run directory's lock: `seconds` (a command-line option) when given, else
    the SOLRL_LOCK_WAIT environment variable, else LOCK_WAIT_SECONDS."""
    if seconds is None:
        text = os.environ.get(LOCK_WAIT_ENV, "").strip()
        try:
            seconds = float(text) if text else LOCK_WAIT_SECONDS
        except ValueError:
            raise SolrlError(f"{LOCK_WAIT_ENV}={text!r} is not a number of seconds; set it to e.g. 600, or 0 to "
                             "fail at once when the run directory is held") from None
    if not 0 <= seconds < float("inf"):
        raise SolrlError(f"a lock wait of {seconds} s is out of range: give 0 (fail at once) or more seconds")
    return seconds


def holder_text() -> str:
    """How a lock names its holder: "pid 123 on host node1 since 2025-01-31 14:02:07"."""
    return f"pid {os.getpid()} on host {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"


class LockWait:
    """Waiting for a run directory another process holds: `pause(holder)` sleeps a moment, having said once (by
    `say`, default: a line on stderr) what it waits for; past `seconds` it raises the one-line RunDirLockedError."""

    def __init__(self, name: str, seconds: float, say=None):
        self.name, self.seconds = name, seconds
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.deadline = time.monotonic() + seconds
        self.said = False

    def pause(self, holder: str) -> None:
        if time.monotonic() >= self.deadline:
            waited = f" (waited {self.seconds:g} s)" if self.seconds > 0 else ""
            raise RunDirLockedError(f"run directory {self.name} is held by {holder}{waited}; wait for it to finish "
                                    "or use another --run-dir")
        if not self.said:
            self.say(f"solrl: waiting for the run directory's lock, held by {holder} (up to {self.seconds:g} s: "
                     f"--lock-wait or {LOCK_WAIT_ENV} says how long)")
            self.said = True
        time.sleep(min(LOCK_POLL_SECONDS, max(self.deadline - time.monotonic(), 0.0)))


class Lease:
    """An advisory lock on a run directory in an object store: the object `path` holds the owner and a heartbeat
    time that a background thread renews every `seconds / 4`.

    Taking it: create the object with an exclusive create (`x` mode: a conditional PUT, If-None-Match, on S3) so
    that of two runs starting at once exactly one wins. Filesystems without exclusive create get a check-then-write
    followed by a read-back of the owner token, which narrows but cannot close the race. A lease whose heartbeat is
    older than `seconds` belongs to a dead process and is taken over. Released by deleting the object. A lease held
    by a live process is waited for up to `wait` seconds (`acquire`), saying once what it waits for.
    """

    def __init__(self, path, seconds: float = LEASE_SECONDS):
        self.path = path
        try:
            self.seconds = float(os.environ.get("SOLRL_LEASE_SECONDS", seconds))
        except ValueError:
            raise SolrlError("SOLRL_LEASE_SECONDS must be a number of seconds") from None
        self.token = uuid.uuid4().hex
        self.owner = holder_text()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _record(self) -> bytes:
        return json.dumps({"owner": self.owner, "token": self.token, "heartbeat": time.time(),
                           "seconds": self.seconds}).encode()

    def _read(self) -> dict | None:
        try:
            return json.loads(self.path.read_bytes())
        except (FileNotFoundError, ValueError):
            return None

    def _create(self) -> bool:
        """Create the lease object if absent; True when this call created it."""
        fs, key = self.path.fs, self.path.path
        try:
            with fs.open(key, "xb") as fh:
                fh.write(self._record())
        except FileExistsError:
            return False
        except (ValueError, NotImplementedError):  # no exclusive create: check, write, read back
            if fs.exists(key):
                return False
            with fs.open(key, "wb") as fh:
                fh.write(self._record())
        fs.invalidate_cache(key)
        current = self._read()
        return current is not None and current.get("token") == self.token

    def acquire(self, name: str, wait: float = 0.0, say=None) -> None:
        """Take the lease; while a live process holds it, wait up to `wait` seconds (polling), calling `say` once
        with what it waits for; then a RunDirLockedError."""
        waiting = LockWait(name, wait, say)
        while True:
            held = self._try_acquire(name)
            if held is None:
                return
            waiting.pause(held)

    def holder(self) -> str | None:
        """Who holds the lease now ("pid 123 on host node1 since ..."), None when no live process does."""
        current = self._read()
        if current is None or time.time() - float(current.get("heartbeat", 0)) >= float(
                current.get("seconds", self.seconds)):
            return None
        return str(current.get("owner", "another process"))

    def _try_acquire(self, name: str) -> str | None:
        """Take the lease now: None when taken, else who holds it."""
        for _ in range(2):
            try:
                created = self._create()
            except (FileNotFoundError, PermissionError) as exc:  # no such bucket, or no right to write there
                raise SolrlError(f"cannot write to run directory {name}: {exc}") from None
            if created:
                self._thread = threading.Thread(target=self._heartbeat, name="solrl-lease", daemon=True)
                self._thread.start()
                return None
            current = self._read()
            if current is None:
                continue  # released meanwhile: try again
            age = time.time() - float(current.get("heartbeat", 0))
            if age < float(current.get("seconds", self.seconds)):
                return f"{current.get('owner', 'another process')} (lease renewed {age:.0f} s ago)"
            self.path.fs.rm(self.path.path)  # abandoned: its holder stopped renewing it
            self.path.fs.invalidate_cache(self.path.path)
        return "another process, which is taking it"

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.seconds / 4):
            try:
                current = self._read()
                if current is None or current.get("token") != self.token:
                    return  # taken over (we were presumed dead): stop renewing someone else's lease
                self.path.write_bytes(self._record())
            except OSError:  # the store is unreachable for a moment: the next beat tries again
                continue

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        current = self._read()
        if current is not None and current.get("token") == self.token:
            self.path.fs.rm(self.path.path)
            self.path.fs.invalidate_cache(self.path.path)
