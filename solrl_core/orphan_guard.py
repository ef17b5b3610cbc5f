"""Child processes that do not outlive the solrl command that started them, even when it is killed with SIGKILL.

    python -m solrl_core.orphan_guard PARENT_PID COMMAND [ARG ...]

On Linux this asks the kernel to send SIGTERM to this process when its parent dies (prctl PR_SET_PDEATHSIG), then
becomes COMMAND (exec: same process id; the request survives the exec). COMMAND therefore stops as it stops on a
supervisor's SIGTERM (uvicorn shuts down, torchrun stops its ranks). If PARENT_PID is already gone at that point,
it exits at once. Elsewhere (no prctl) it runs COMMAND as its child, polls its own parent, and terminates COMMAND
when the parent is gone. Start children with `guarded(cmd)` instead of `cmd`.

The kernel sends the signal when the *thread* that started the child ends: start guarded children from a thread that
lives as long as they should (the main thread, or one that waits for the child).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_SECONDS = 0.5  # how often the fallback looks for its parent
STOP_SECONDS = 10.0  # the fallback's grace period between SIGTERM and SIGKILL of COMMAND


def guarded(cmd: list[str]) -> list[str]:
    """`cmd` run so that it stops when this process dies, however it dies."""
    return [sys.executable, "-m", __name__, str(os.getpid()), *cmd]


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _watch(parent: int, cmd: list[str]) -> int:
    """The fallback without prctl: run `cmd`; terminate it when `parent` is no longer this process's parent."""
    child = subprocess.Popen(cmd)
    for signum in (signal.SIGTERM, signal.SIGINT):  # stopping this process stops COMMAND
        signal.signal(signum, lambda *_: child.terminate())
    while child.poll() is None:
        if os.getppid() != parent:
            child.terminate()
            try:
                return child.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()
                return child.wait()
        time.sleep(POLL_SECONDS)
    return child.returncode


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        sys.exit("usage: python -m solrl_core.orphan_guard PARENT_PID COMMAND [ARG ...]")
    parent, cmd = int(argv[0]), argv[1:]
    prctl = _prctl()
    if prctl is None:
        return _watch(parent, cmd)
    if prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return _watch(parent, cmd)
    if os.getppid() != parent:  # the parent died before the request was made: nobody would signal us
        return 1
    os.execvp(cmd[0], cmd)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
