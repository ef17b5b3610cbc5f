"""One command of a case: run in its own session (so a hang can be killed whole), optionally signalled mid-run, and
followed by a search for the processes it left behind.

Every process the command starts inherits an environment variable with a token unique to this command; after the
command has ended, any live process whose environment holds that token is a process left behind (an orphan), whatever
session or parent it moved to. Orphans are recorded, then killed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TOKEN_VAR = "SOLRL_FAULT_TOKEN"
_LIVE: set[int] = set()  # sessions of the commands running now (killed by kill_running)
_STOPPING: list[bool] = []  # set by kill_running: no command starts after it
ORPHAN_GRACE_S = 3.0  # children still exiting this long after the command ended are counted as left behind


@dataclass
class Signal:
    """Send `signum` once `ready()` is true (or after `max_wait_s`), to the process (`group=False`, as `kill PID` or
    the OOM killer) or to its whole process group (`group=True`, as Ctrl-C in a terminal)."""

    signum: int
    ready: Callable[[], bool]
    group: bool = False
    max_wait_s: float = 300.0


@dataclass
class Finished:
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    signalled: str | None = None  # "SIGTERM after 12.3 s" when a signal was sent
    orphans: list[str] = field(default_factory=list)  # "pid cmdline" of each process left behind


def unprivileged(argv: list[str]) -> list[str]:
    """`argv` run so that file permissions hold: as root, without the capabilities that bypass them."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeError("running as root without setpriv (util-linux): permission faults cannot be tried")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", *argv]


def limited(argv: list[str], limits) -> list[str]:
    """`argv` run under the shell's `ulimit` options `limits` (("-n", 32), ...), soft and hard, as a user sets them."""
    options = "; ".join(f"ulimit {flag} {int(value)}" for flag, value in limits)
    return ["bash", "-c", f'{options} && exec "$@"', "limited", *argv]


_SMALL_DISK = """size=$1 mnt=$2 src=$3; shift 3
mount -t tmpfs -o size=${size}k tmpfs "$mnt" && cp -a "$src" "$mnt/run" || exit 97
"$@"; rc=$?
rm -rf "$src" && cp -a "$mnt/run" "$src"
exit $rc"""


def small_disk_available() -> bool:
    """Whether this machine lets us mount a small tmpfs in a private mount namespace (root, unshare)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


def on_small_disk(argv: list[str], run_dir: Path, mount: Path, free_kb: int) -> list[str]:
    """`argv` run with a copy of `run_dir` at `mount`/run, on a tmpfs (private to the command) with `free_kb` KiB
    left; afterwards the copy, as the command left it, replaces `run_dir`."""
    used_kb = sum(-(-p.stat().st_size // 4096) * 4 for p in run_dir.rglob("*") if p.is_file())
    return ["unshare", "-m", "bash", "-c", _SMALL_DISK, "bash", str(used_kb + free_kb), str(mount), str(run_dir),
            *argv]


def _environ_has(pid: str, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            if fh.read().rsplit(b")", 1)[-1].split()[0] == b"Z":  # a zombie holds nothing
                return False
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return needle in fh.read().split(b"\0")
    except OSError:
        return False


def processes_with(token: str) -> list[int]:
    """Live processes whose environment carries `token`."""
    needle = f"{TOKEN_VAR}={token}".encode()
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _environ_has(pid, needle)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _left_behind(token: str, grace_s: float) -> list[str]:
    deadline = time.monotonic() + grace_s
    while (pids := processes_with(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    found = [f"{pid} {_cmdline(pid)}" for pid in pids]
    _kill_all(pids)
    return found


def run(argv: list[str], env: dict[str, str], cwd: Path, timeout_s: float, sig: Signal | None = None) -> Finished:
    """Run `argv` to its end (or `timeout_s`, then kill its session), sending `sig` on the way; report what it left."""
    if stopping():
        raise RuntimeError("the fault catalogue is stopping")
    token = uuid.uuid4().hex
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(argv, env={**env, TOKEN_VAR: token}, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, start_new_session=True)
        _LIVE.add(proc.pid)
        signalled = None
        if sig is not None:
            waited = start + sig.max_wait_s
            while proc.poll() is None and not sig.ready() and time.monotonic() < waited:
                time.sleep(0.05)
            if proc.poll() is None:
                (os.killpg if sig.group else os.kill)(proc.pid, sig.signum)
                signalled = f"{signal.Signals(sig.signum).name} after {time.monotonic() - start:.1f} s"
        timed_out = False
        try:
            proc.wait(timeout=max(0.0, start + timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        _LIVE.discard(proc.pid)
        seconds = time.monotonic() - start
        orphans = _left_behind(token, ORPHAN_GRACE_S)
        out.seek(0)
        err.seek(0)
        return Finished(argv, proc.returncode, out.read().decode(errors="replace"),
                        err.read().decode(errors="replace"), seconds, timed_out, signalled, orphans)


def stopping() -> bool:
    return bool(_STOPPING)


def kill_running() -> None:
    """Kill the sessions of the commands running now, and start no other (the catalogue itself is being stopped)."""
    _STOPPING.append(True)
    for pid in list(_LIVE):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
