"""SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal closed) stop a command the same way: KeyboardInterrupt, so the
flows record the interruption, every `finally` stops the children (temporary Prefect server, Dask workers, torchrun)
and the run directory keeps what was committed; the command then exits 128 + the signal's number (130 for SIGINT,
143 for SIGTERM, 129 for SIGHUP), as shells report it. `stop_on_signals()` installs the handler first thing in main(),
so a signal during start-up (imports, config, model load) stops the command as one later does.

SIGINT and SIGHUP are taken over only where they are at their defaults: a command started in the background by a
shell ignores SIGINT, and one started with `nohup` ignores SIGHUP; both keep ignoring them. Inside a flow Prefect's
own SIGTERM handler runs first (it marks the flow run Crashed), then passes the signal on to this one. A second
SIGTERM or SIGHUP while the command is stopping is ignored (SIGKILL still ends it; the children then stop by
themselves, see solrl_core/orphan_guard.py); a second Ctrl-C interrupts the stopping, as Python's own handler does.

A stop is not lost when its KeyboardInterrupt is:
* raised while Python runs a finalizer (a weakref callback, `__del__`): Python would print "Exception ignored" and
  carry on as if nothing had been sent, so the command would finish and exit 0. `sys.unraisablehook` sees that
  exception; the hook has a timer thread send the signal again a moment later (sent at once it would be handled
  inside the hook, and lost the same way), when the finalizer has returned;
* dropped by C or Rust code that called back into Python (seen while pydantic builds a model class during an import,
  two seconds into `solrl train`): the handler records the stop in solrl_core/stop.py, and the next stage to start,
  or the end of the command, raises it again (`solrl_core.stop.check`);
* sent after main() has returned, while the process ends (Prefect sends its last logs and events, the temporary
  Prefect server stops: a second or more), when an interrupt would break that shutdown and the exit code is already
  chosen: `stop_late()` makes a first signal from then on only noted; the shutdown completes and the command ends
  with the resume line and the interrupted exit code all the same. A second signal ends it at once, the same way.
  Then the last exit handler ends the process (os._exit, the only way to change an exit code once chosen, after
  flushing the output and the log handlers), skipping the interpreter's teardown: seconds of garbage collection of
  everything imported, during which no handler sees a signal any more (and where a KeyboardInterrupt that had
  passed through code run by `exec()` of a string, as dataclasses build their methods, would make `python -m` end
  itself by SIGINT whatever exit code was chosen).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading

from solrl_core import stop

REDELIVERY_DELAY_S = 0.1  # after the finalizer that swallowed the stop has returned
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_ONCE = (signal.SIGTERM, signal.SIGHUP)  # ignored while the command stops
RESUME_LINE = "solrl: interrupted; run the same command again to resume"
_previous_unraisablehook = sys.unraisablehook
_late: dict = {"code": None, "signum": None}  # the exit code main() chose, and a stop signal noted after it


def _stop(signum, frame) -> None:
    stop.request(signum)
    for other in _ONCE:  # Prefect's SIGTERM handler too, inside a flow: it has passed this one on
        if signal.getsignal(other) != signal.SIG_IGN:  # (nohup's SIGHUP stays ignored, in children too)
            signal.signal(other, _ignore)
    raise KeyboardInterrupt


def _ignore(signum, frame) -> None:
    pass


def _taken_over(signum: int) -> bool:
    """Whether this command handles `signum`: SIGTERM always; SIGINT and SIGHUP unless set aside (see the module's
    docstring: Python's own Ctrl-C handler, or the default action of SIGHUP, is what we replace)."""
    current = signal.getsignal(signum)
    if signum == signal.SIGINT:
        return current is signal.default_int_handler
    if signum == signal.SIGHUP:
        return current == signal.SIG_DFL
    return True


def stop_on_signals() -> None:
    """Make SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread (elsewhere, e.g. `main()` called
    from a thread, signals cannot be handled and this does nothing)."""
    try:
        for signum in STOP_SIGNALS:
            if _taken_over(signum):
                signal.signal(signum, _stop)
    except ValueError:  # not the main thread
        return
    sys.unraisablehook = _redeliver_lost_stop
    atexit.unregister(_end_process)
    atexit.register(_end_process)  # registered first, so it runs after every later exit handler


def _redeliver_lost_stop(unraisable) -> None:
    """Send again a stop signal whose exception a finalizer swallowed (see the module's docstring)."""
    exc = unraisable.exc_value
    lost = getattr(exc, "signal", None)  # Prefect's TerminationSignal carries the signal it stands for
    if isinstance(lost, int):  # to the handler installed then: Prefect's again inside a flow, else ours
        _later(os.kill, os.getpid(), lost)
    elif isinstance(exc, KeyboardInterrupt):  # the signal it stood for again (not SIGINT for all: a command started
        signum = stop.requested() or signal.SIGINT  # in the background by a shell ignores SIGINT)
        _rearm(signum)
        _later(os.kill, os.getpid(), signum)
    else:
        _previous_unraisablehook(unraisable)


def _rearm(signum: int) -> None:
    """The next `signum` stops the command again (the lost stop had set SIGTERM and SIGHUP aside)."""
    try:
        if signal.getsignal(signum) is _ignore:
            signal.signal(signum, _stop)
    except ValueError:  # not the main thread: the stop was not raised by a signal handler
        pass


def _later(send, *args) -> None:
    timer = threading.Timer(REDELIVERY_DELAY_S, send, args)
    timer.daemon = True
    timer.start()


def interrupted_exit_code() -> int:
    """The exit code of a command stopped by KeyboardInterrupt: 128 + the signal (130 after Ctrl-C, 143 after
    SIGTERM, 129 after SIGHUP; 130 for an interrupt no signal recorded)."""
    return 128 + int(stop.requested() or signal.SIGINT)


def stop_late(code: int) -> None:
    """main() has chosen its exit `code`: from now on a stop signal does not interrupt the shutdown (see the module's
    docstring), it only changes how the command ends."""
    _late["code"] = code
    try:
        for signum in STOP_SIGNALS:
            if signal.getsignal(signum) in (_stop, _ignore):
                signal.signal(signum, _noted)
    except ValueError:  # not the main thread: no handler of ours was installed
        pass


def _noted(signum, frame) -> None:
    if _late["signum"] is None:
        _late["signum"] = signum
        return
    _end_now()  # a second one: the shutdown takes too long for the user


def _end_process() -> None:
    """The last exit handler of a command that owns its process (registered first, so every exit handler the command
    registered has run: Prefect has sent its logs, the temporary server has stopped): end it now, with main()'s exit
    code, or the interrupted one after a stop signal noted since main() returned. What is skipped is the
    interpreter's own teardown: seconds of garbage collection of everything imported, during which no handler sees a
    signal any more (a SIGTERM there read as exit 0, a Ctrl-C as -2)."""
    if _late["code"] is not None:  # else main() did not return (a traceback): Python ends as usual
        _end_now()


def _interrupted_already() -> bool:
    """main() chose an interrupted exit (and said so)."""
    return _late["code"] in {128 + int(s) for s in STOP_SIGNALS}


def _end_now() -> None:
    """End the command now: the output and the log handlers flushed, the resume line after a late stop (unless main()
    said it), exit 128 + the signal (else main()'s code)."""
    late = _late["signum"] is not None and not _interrupted_already()
    if late:
        try:
            print(RESUME_LINE, file=sys.stderr)
        except (OSError, ValueError):  # stderr is gone (SIGHUP: the terminal closed)
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    os._exit(128 + int(_late["signum"]) if late else int(_late["code"] or 0))
