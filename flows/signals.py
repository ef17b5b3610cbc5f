"""SIGTERM stops a command as Ctrl-C (SIGINT) does: KeyboardInterrupt, so the flows record the interruption, every
`finally` stops the children (temporary Prefect server, Dask workers, torchrun) and the run directory keeps what was
committed; the command then exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as shells report it.

Inside a flow Prefect's own SIGTERM handler runs first (it marks the flow run Crashed), then passes the signal on to
this one. A second SIGTERM while the command is stopping is ignored (SIGKILL still ends it; the children then stop by
themselves, see solrl_core/orphan_guard.py).

A signal whose handler raises while Python runs a finalizer (a weakref callback, `__del__`) is not lost: Python
would print "Exception ignored" and carry on as if nothing had been sent, so the command would finish and exit 0.
`sys.unraisablehook` sees that exception; the hook has a timer thread send the signal again a moment later (sent at
once it would be handled inside the hook, and lost the same way), when the finalizer has returned.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

REDELIVERY_DELAY_S = 0.1  # after the finalizer that swallowed the stop has returned
_received = [signal.SIGINT]
_previous_unraisablehook = sys.unraisablehook


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
        return
    sys.unraisablehook = _redeliver_lost_stop


def _redeliver_lost_stop(unraisable) -> None:
    """Send again a stop signal whose exception a finalizer swallowed (see the module's docstring)."""
    exc = unraisable.exc_value
    lost = getattr(exc, "signal", None)  # Prefect's TerminationSignal carries the signal it stands for
    if isinstance(lost, int):  # to the handler installed then: Prefect's again inside a flow, else ours
        _later(os.kill, os.getpid(), lost)
    elif isinstance(exc, KeyboardInterrupt):  # the signal it stood for again (not SIGINT for all: a command started
        signum = _received[0]                    # in the background by a shell ignores SIGINT)
        if signum == signal.SIGTERM:
            _rearm_sigterm()
        _later(os.kill, os.getpid(), signum)
    else:
        _previous_unraisablehook(unraisable)


def _rearm_sigterm() -> None:
    """The next SIGTERM stops the command again (the lost one had set SIGTERM aside as a second stop)."""
    try:
        signal.signal(signal.SIGTERM, _stop)
    except ValueError:  # not the main thread: the stop was not raised by a signal handler
        pass


def _later(send, *args) -> None:
    timer = threading.Timer(REDELIVERY_DELAY_S, send, args)
    timer.daemon = True
    timer.start()


def interrupted_exit_code() -> int:
    """The exit code of a command stopped by KeyboardInterrupt: 130 after Ctrl-C, 143 after SIGTERM."""
    return 128 + int(_received[0])
