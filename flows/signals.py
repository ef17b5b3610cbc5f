"""SIGTERM stops a command as Ctrl-C (SIGINT) does: KeyboardInterrupt, so the flows record the interruption, every
`finally` stops the children (temporary Prefect server, Dask workers, torchrun) and the run directory keeps what was
committed; the command then exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as shells report it.

Inside a flow Prefect's own SIGTERM handler runs first (it marks the flow run Crashed), then passes the signal on to
this one. A second SIGTERM while the command is stopping is ignored (SIGKILL still ends it; the children then stop by
themselves, see solrl_core/orphan_guard.py).
"""

from __future__ import annotations

import signal

_received = [signal.SIGINT]


def _stop(signum, frame) -> None:
    _received[0] = signum
    signal.signal(signal.SIGTERM, _ignore)
    raise KeyboardInterrupt


def _ignore(signum, frame) -> None:
    pass


def stop_on_sigterm() -> None:
    """Make SIGTERM raise KeyboardInterrupt in the main thread (elsewhere, e.g. `main()` called from a thread,
    signals cannot be handled and this does nothing)."""
    try:
        signal.signal(signal.SIGTERM, _stop)
    except ValueError:
        pass


def interrupted_exit_code() -> int:
    """The exit code of a command stopped by KeyboardInterrupt: 130 after Ctrl-C, 143 after SIGTERM."""
    return 128 + int(_received[0])
