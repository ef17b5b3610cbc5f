"""Reading the files a user names (configs, prompt lists) and explaining failed file operations in one line.

Everything here ends in a SolrlError (or its message) that names the path and says what to fix; the CLI prints it as
one line and exits 2. Errors that are not the user's to fix are left alone (they keep their traceback).
"""

from __future__ import annotations

import errno
import os
import tempfile
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path

from solrl_core.errors import SolrlError

# OSErrors a user causes or fixes wherever they happen: a full disk or quota, missing permissions, a read-only
# filesystem. (A path that is a file where a directory belongs is checked where the path is given: RunDir.check.)
USER_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS}


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of the file `path` that the user named (`what` says where, e.g. 'prompts.train'). A directory,
    an unreadable file or bytes that are not UTF-8 are a SolrlError naming the path. A missing file is the caller's
    to report (it knows the hint to give). Anything else that is not a regular file (a FIFO, a socket, a device) is
    refused without being opened: reading a FIFO would wait for a writer forever."""
    try:
        kind = entry_kind(path)
        if kind == DIRECTORY:
            raise SolrlError(f"{what}: {path} is a directory; give a file")
        if kind not in (None, FILE):
            raise SolrlError(f"{what}: {path} is {kind}, not a regular file; give a file")
        text = _read_regular(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise SolrlError(f"{what}: {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} on line {line}); "
                         "save it as UTF-8") from None
    except OSError as exc:
        raise SolrlError(f"{what}: cannot read {path} ({exc.strerror}); {_fix(exc)}") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # newlines as a text-mode read gives them


def _read_regular(path: Path) -> bytes:
    """The bytes of `path`, opened without blocking and refused unless it is a regular file once open (it may have
    been replaced by a FIFO since `entry_kind` looked at it)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return file.read()


def _fix(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "check its permissions"
    if exc.errno == errno.EROFS:
        return "the filesystem is read-only; use a writable one"
    return "check the path"


def closest_existing(path) -> Path:
    """`path` (made absolute) or its closest existing ancestor."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


FILE, DIRECTORY = "a file", "a directory"  # what `entry_kind` says of the two kinds solrl writes


def entry_kind(path) -> str | None:
    """What is at `path`, in words, without following a last symbolic link that does not resolve: None (nothing),
    FILE (a regular file, or a link to one), DIRECTORY (or a link to one), or what else it is ("a symbolic link that
    leads nowhere", "a symbolic link that loops", "a FIFO", ...)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "a symbolic link that leads nowhere" if os.path.islink(path) else None
    except NotADirectoryError:  # a file where one of its folders should be: nothing can be at `path`
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link that loops"
        raise
    if stat.S_ISREG(st.st_mode):
        return FILE
    if stat.S_ISDIR(st.st_mode):
        return DIRECTORY
    return {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
            stat.S_IFBLK: "a block device"}.get(stat.S_IFMT(st.st_mode), "not a file")


def broken_link(path) -> tuple[Path, str] | None:
    """The first component of `path` (made absolute) that is a symbolic link that leads nowhere or loops, with what
    it is in words; None when there is none."""
    path = Path(path).absolute()
    for part in [*reversed(path.parents), path]:
        if os.path.islink(part):
            kind = entry_kind(part)
            if kind not in (None, FILE, DIRECTORY) and "symbolic link" in kind:
                return part, kind
    return None


def check_output_dir(path, flag: str) -> None:
    """A SolrlError naming `path` (the value of option `flag`, e.g. --out) unless a directory can be made or written
    there: checked before a command's work, so that a command does not fail only at its end. Refused: something
    other than a directory at `path`, a symbolic link on the way that leads nowhere or loops, a file where a folder
    of it would be, a closest existing folder that is not writable (permissions, a read-only filesystem)."""
    given, path = path, Path(path).absolute()
    link = broken_link(path)
    if link is not None:
        where, kind = link
        what = f" is {kind}" if where == path else f": {where} is {kind}"
        raise SolrlError(f"{flag} {given}{what} (to {os.readlink(where)}); fix the link (or create what it points "
                         f"to) or give another {flag}")
    kind = entry_kind(path)
    if kind not in (None, DIRECTORY):
        raise SolrlError(f"{flag} {given} is {kind}, not a directory; give a directory (made if missing)")
    folder = closest_existing(path)
    if not folder.is_dir():
        raise SolrlError(f"{flag} {given}: {folder} is a file, not a directory; give another path")
    why = unwritable_reason(folder)
    if why:
        raise SolrlError(f"{flag} {given}: cannot write to {folder} ({why}); make it writable or give another {flag}")


def check_output_file(path, flag: str) -> None:
    """A SolrlError naming `path` (the value of `flag`) unless a file can be written there: not a directory or other
    non-file, its folder made if missing under a writable closest existing folder. Checked before the work."""
    given, path = path, Path(path).absolute()
    kind = entry_kind(path)
    if kind not in (None, FILE):
        raise SolrlError(f"{flag} {given} is {kind}, not a file; give a file path")
    folder = closest_existing(path.parent)
    if not folder.is_dir():
        raise SolrlError(f"{flag} {given}: {folder} is a file, not a directory; give another path")
    why = unwritable_reason(folder)
    if why:
        raise SolrlError(f"{flag} {given}: cannot write to {folder} ({why}); make it writable or give another {flag}")


def unwritable_reason(folder: Path) -> str | None:
    """Why files cannot be made in the existing `folder` (read-only filesystem, permissions, a filesystem that takes no
    new files, as /proc); None if they can: the permission bits say so and a probe file is made and removed."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return "the filesystem is read-only" if os.statvfs(folder).f_flag & os.ST_RDONLY else "permission denied"
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".solrl-probe-"):
            pass
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def format_bytes(n: float) -> str:
    """`n` bytes for a person: 512 B, 3.0 MiB, 71.8 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def tree_size(path: Path) -> int:
    """Bytes of the files under the local folder `path` (0 when it does not exist)."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def disk_full_message(path, where: str = "", needed: str | None = None, folder=None) -> str:
    """'no space left ...' naming `path` (None: unknown), the free space of its filesystem (of `folder`'s when the path
    is unknown; none said when neither is known) and, when known, what is `needed`."""
    where = f"{where}: " if where else ""
    place = path if path is not None else folder
    free = [f"{format_bytes(shutil.disk_usage(closest_existing(place)).free)} free"] if place is not None else []
    need = [f"it needs about {needed}"] if needed else []
    said = f" ({'; '.join(free + need)})" if free or need else ""
    written = path if path is not None else (f"a file in {folder}" if folder is not None else "a file")
    return f"{where}no space left on the device writing {written}{said}; free some space or use another --run-dir"


def user_os_error(exc: OSError, where: str = "", needed=None, folder=None) -> SolrlError | None:
    """A one-line SolrlError for an OSError the user can fix (see USER_ERRNOS), naming its path; None for any other
    error (a bug, which keeps its traceback). `needed`: a function saying how much space the work needs, or None;
    `folder`: where the work writes (the run directory), for a full disk's free space when the error names no path."""
    if exc.errno not in USER_ERRNOS:
        return None
    path = exc.filename if exc.filename is not None else "a file"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return SolrlError(disk_full_message(exc.filename, where, needed() if needed else None, folder))
    prefix = f"{where}: " if where else ""
    return SolrlError(f"{prefix}{path}: {exc.strerror}; {_fix(exc)} or use another path")


@contextmanager
def user_os_errors(where: str = "", needed=None, folder=None):
    """Turn an OSError the user can fix, raised inside the block, into its one-line SolrlError (see user_os_error);
    `where` says what was running (e.g. 'stage explore of iteration 3'), `needed` and `folder` as in user_os_error."""
    try:
        yield
    except OSError as exc:
        error = user_os_error(exc, where, needed, folder)
        if error is None:
            raise
        raise error from None
