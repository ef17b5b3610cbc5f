"""MLflow logging off the training's critical path: one worker thread logs, in submission order, what the training
flow hands it (an iteration's metrics, pool table, thumbnails and grids; an evaluation; an audit) while the next
iteration computes. One thread, so the MLflow store sees one writer, as before.

Nothing is lost: the flow waits for every submitted logging before it returns, and the first logging error is raised
then (or at the next submit). A command stopped mid-run drops the logging not yet started; each `log_*` writes its
marker file only after logging, so the next `solrl train` of the run logs what is missing (flows/tracking.py).

While the worker runs, the interpreter hands the GIL between threads every SWITCH_INTERVAL seconds instead of
CPython's 5 ms: the training thread's short steps between stages (each Prefect API call, each file written) wait for
the GIL after every blocking call, and would otherwise wait up to 5 ms each time behind the worker's Python.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor


SWITCH_INTERVAL = 0.001  # seconds (CPython's default: 0.005)


class TrackingQueue:
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solrl-mlflow")
        self._pending: list[Future] = []

    def submit(self, log: Callable, *args) -> None:
        """Log with `log(*args)` in the worker thread; first raise the error of an earlier logging, if one failed."""
        self._raise_failed()
        self._pending.append(self._pool.submit(log, *args))

    def drain(self) -> None:
        """Wait for every submitted logging; raise the first error."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def _raise_failed(self) -> None:
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        for future in done:
            future.result()

    def __enter__(self) -> TrackingQueue:
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(SWITCH_INTERVAL, self._switch_interval))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                try:
                    self.drain()
                finally:
                    self._pool.shutdown(wait=True)
            else:  # stopped or failed: finish the logging under way, drop the rest (logged on the next run)
                self._pool.shutdown(wait=True, cancel_futures=True)
        finally:
            sys.setswitchinterval(self._switch_interval)
