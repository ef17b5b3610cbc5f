"""The process's resource limits (`ulimit`): checked before a command works, and named when one ends it.

Measured on the embedded tiny run (`solrl train tests/configs/tiny.yaml --iterations 1`, 2026-11-29): it fails with
16 open files and passes with 32; fails with 3 GB of address space (torch's shared libraries cannot be mapped) and
passes with 8 GB; with a file-size limit of 200 KiB or 2 MiB the MLflow store or the Prefect server's database
stops growing ("disk I/O error", HTTP 500). So:

* open files: the soft limit is raised to the hard one (up to OPEN_FILES_WANTED), as Ray and Dask's workers do; a
  hard limit below OPEN_FILES_NEEDED is refused;
* address space: a finite limit below ADDRESS_SPACE_NEEDED is refused before torch is imported;
* file size: a finite limit below FILE_SIZE_NEEDED is refused (checkpoints, pools and the stores' databases grow
  past it);
* at run time, an error caused by one of these limits (EMFILE, EFBIG, a shared library that cannot be mapped, a
  MemoryError, SQLite's I/O error or the Prefect server's 500 under a file-size limit) is reported in one line that
  names the limit (`limit_error`).
"""

from __future__ import annotations

import errno
import resource

from solrl_core.errors import SolrlError

OPEN_FILES_NEEDED = 64
OPEN_FILES_WANTED = 8192
ADDRESS_SPACE_NEEDED = 8 * 1024**3
FILE_SIZE_NEEDED = 1024**3

_RAISE_IT = "raise it in the shell that starts solrl, then run the same command again (it resumes)"


def _soft(limit: int) -> int | None:
    value = resource.getrlimit(limit)[0]
    return None if value == resource.RLIM_INFINITY else value


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB" if n >= 1024**3 else f"{n / 1024**2:.1f} MiB"


def raise_open_file_limit() -> None:
    """The soft open-file limit up to the hard one (at most OPEN_FILES_WANTED): a command that starts servers and
    workers needs more descriptors than a shell's default of 1,024 on a busy node."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):  # a platform that refuses: the check below says what is short
            pass


def check_resource_limits() -> None:
    """Raise the open-file limit where allowed, then a SolrlError naming the first limit too low for solrl."""
    raise_open_file_limit()
    files = _soft(resource.RLIMIT_NOFILE)
    if files is not None and files < OPEN_FILES_NEEDED:
        raise SolrlError(f"this process may open at most {files} files (ulimit -n, hard limit too) and solrl needs at "
                         f"least {OPEN_FILES_NEEDED} (its stages, the Prefect and MLflow clients, the servers it "
                         f"starts): `ulimit -n 4096`; {_RAISE_IT}")
    space = _soft(resource.RLIMIT_AS)
    if space is not None and space < ADDRESS_SPACE_NEEDED:
        raise SolrlError(f"this process may use {_gib(space)} of address space (ulimit -v {space // 1024}) and torch's "
                         f"libraries alone map more; solrl needs at least {_gib(ADDRESS_SPACE_NEEDED)}, a real model "
                         f"more: `ulimit -v unlimited`; {_RAISE_IT}")
    size = _soft(resource.RLIMIT_FSIZE)
    if size is not None and size < FILE_SIZE_NEEDED:
        raise SolrlError(f"this process may write files of at most {_gib(size)} (ulimit -f {size // 1024}) and solrl's "
                         f"checkpoints, pools and tracking databases grow past {_gib(FILE_SIZE_NEEDED)}: "
                         f"`ulimit -f unlimited`; {_RAISE_IT}")


def causes(exc: BaseException):
    """`exc`, then its cause (or context), then that one's, ... once each."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def limit_error(exc: BaseException) -> SolrlError | None:
    """The one-line error of an exception a resource limit caused (anywhere in its chain of causes), or None."""
    for link in causes(exc):
        text = str(link)
        if isinstance(link, OSError) and link.errno in (errno.EMFILE, errno.ENFILE):
            files = _soft(resource.RLIMIT_NOFILE)
            which = f"this process's limit of {files} open files (ulimit -n)" if link.errno == errno.EMFILE and files \
                else "the system's limit of open files"
            return SolrlError(f"{which} was reached ({link.strerror}); `ulimit -n 4096`; {_RAISE_IT}")
        size = _soft(resource.RLIMIT_FSIZE)
        if size is not None and ((isinstance(link, OSError) and link.errno == errno.EFBIG)
                                 or "disk I/O error" in text or "500 Internal Server Error" in text):
            return SolrlError(f"a file reached this process's file-size limit of {_gib(size)} (ulimit -f "
                              f"{size // 1024}; seen as: {text.splitlines()[0][:120]}): `ulimit -f unlimited`; "
                              f"{_RAISE_IT}")
        space = _soft(resource.RLIMIT_AS)
        if space is not None and (isinstance(link, MemoryError) or "failed to map segment" in text
                                  or "can't allocate memory" in text or "Cannot allocate memory" in text):
            return SolrlError(f"this process ran out of its address-space limit of {_gib(space)} (ulimit -v "
                              f"{space // 1024}): `ulimit -v unlimited`; {_RAISE_IT}")
    return None
