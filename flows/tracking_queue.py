"""MLflow logging off the training's critical path: one worker thread logs, in submission order, what the training
flow hands it (an iteration's metrics, pool table, thumbnails and grids; an evaluation; an audit) while the next
iteration computes. One thread, so the MLflow store sees one writer, as before.

Nothing is lost: the flow waits for every submitted logging before it returns, and the first logging error is raised
then (or at the next submit). After an error the loggings still queued are not started (MLflow just failed: each
would wait out its own timeouts); neither is anything queued when the block is left by an error or a stop. Each
`log_*` writes its marker file only after logging, so the next `solrl train` of the run logs what is missing
(flows/tracking.py).

Waits are bounded: every MLflow request is (its timeout and retries, flows/service_checks.py MLFLOW_HTTP_DEFAULTS), and
the flow waits for a logging at most `wait` seconds (DRAIN_WAIT_S, or $SOLRL_TRACKING_WAIT) after the previous one
finished or the wait began: a tracking server that stalls without failing its requests (stopped, or trickling bytes)
then ends the command in one line, `TrackingStalled`. The worker is a daemon thread, so a logging stuck in MLflow
never keeps the process from exiting.

While the worker runs, the interpreter hands the GIL between threads every SWITCH_INTERVAL seconds instead of
CPython's 5 ms: the training thread's short steps between stages (each Prefect API call, each file written) wait for
the GIL after every blocking call, and would otherwise wait up to 5 ms each time behind the worker's Python.
"""

from __future__ import annotations

import math
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout

from solrl_core.errors import SolrlError

SWITCH_INTERVAL = 0.001  # seconds (CPython's default: 0.005)
DRAIN_WAIT_ENV = "SOLRL_TRACKING_WAIT"
DRAIN_WAIT_S = 60.0  # seconds the flow waits for one logging, once it waits for it (see the module's docstring)


class TrackingStalled(SolrlError):
    """A logging did not finish within the drain's wait: the tracking server does not answer."""


def drain_wait_seconds() -> float:
    """How long the flow waits for one logging: $SOLRL_TRACKING_WAIT, else DRAIN_WAIT_S."""
    text = os.environ.get(DRAIN_WAIT_ENV, "").strip()
    try:
        seconds = float(text) if text else DRAIN_WAIT_S
    except ValueError:
        raise SolrlError(f"{DRAIN_WAIT_ENV}={text[:40]!r} is not a number of seconds; set it to e.g. "
                         f"{DRAIN_WAIT_S:g}") from None
    if not 0 < seconds < math.inf:
        raise SolrlError(f"{DRAIN_WAIT_ENV}={text[:40]!r} is out of range: give a positive number of seconds")
    return seconds


def _subject(log: Callable, args: tuple) -> str:
    """What a logging logs, in words: the function's `describe(*args)` when it has one (flows/tracking.py)."""
    describe = getattr(log, "describe", None)
    if describe is not None:
        try:
            return describe(*args)
        except Exception:  # noqa: BLE001 - the words are for a message; its own failure must not hide the stall
            pass
    return getattr(log, "__name__", "MLflow logging")


class TrackingQueue:
    def __init__(self, wait: float | None = None) -> None:
        self._wait = drain_wait_seconds() if wait is None else wait
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._pending: list[Future] = []
        self._what: dict[Future, tuple[Callable, tuple]] = {}
        self._failure: BaseException | None = None  # the first logging error
        self._reported = False  # whether it was raised (once is enough)
        self._thread = threading.Thread(target=self._work, name="solrl-mlflow", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, log, args = job
            if self._failure is not None:
                future.cancel()  # MLflow just failed: not asked again (the next run logs this)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = log(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the flow's thread, which raises it
                if self._failure is None:
                    self._failure = exc
                future.set_exception(exc)
            else:
                future.set_result(result)

    def submit(self, log: Callable, *args) -> None:
        """Log with `log(*args)` in the worker thread; first raise the error of an earlier logging, if one failed."""
        self._raise_failed()
        future: Future = Future()
        self._pending.append(future)
        self._what[future] = (log, args)
        self._jobs.put((future, log, args))

    def drain(self) -> None:
        """Wait for every submitted logging (each at most `wait` seconds after the one before it finished, or after
        the wait began); raise the first error, or TrackingStalled."""
        pending, self._pending = self._pending, []
        since = time.monotonic()
        for future in pending:
            try:
                future.result(timeout=max(0.0, since + self._wait - time.monotonic()))
            except CancelledError:
                continue
            except FutureTimeout:
                self._abandon(pending)
                raise self._stalled(future) from None
            except BaseException:
                break  # the first error, raised below (the loggings after it were not started)
            since = time.monotonic()
        self._raise_failed()

    def _stalled(self, future: Future) -> TrackingStalled:
        what = _subject(*self._what[future])
        return TrackingStalled(
            f"MLflow logging of {what} has not finished after a wait of {self._wait:g} s (the tracking server does "
            "not answer); the run directory is complete and consistent up to there, and nothing is lost: once MLflow "
            f"answers, run the same command again (it logs what is not logged yet; {DRAIN_WAIT_ENV}=SECONDS waits "
            "longer)")

    def _abandon(self, pending: list[Future]) -> None:
        """Start none of `pending` that has not started (the stuck one goes on alone, in its daemon thread)."""
        for future in pending:
            future.cancel()

    def _raise_failed(self) -> None:
        self._pending = [f for f in self._pending if not f.done()]
        self._what = {f: what for f, what in self._what.items() if not f.done()}
        if self._failure is not None and not self._reported:
            self._reported = True
            raise self._failure

    def _stop(self) -> None:
        """Left by an error or a stop: start nothing more, and wait (as `drain` does) for the logging under way."""
        pending, self._pending = self._pending, []
        self._abandon(pending)
        running = [f for f in pending if not f.cancelled()]
        for future in running:
            try:
                future.exception(timeout=self._wait)
            except (FutureTimeout, CancelledError):
                return

    def __enter__(self) -> TrackingQueue:
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(SWITCH_INTERVAL, self._switch_interval))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.drain()
            else:  # stopped or failed: finish the logging under way, drop the rest (logged on the next run)
                self._stop()
        finally:
            self._jobs.put(None)  # the worker ends after its logging
            sys.setswitchinterval(self._switch_interval)
