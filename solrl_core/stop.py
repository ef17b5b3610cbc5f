"""A stop the user asked for (Ctrl-C, SIGTERM, SIGHUP), for the work that must not go on after one.

The command's signal handler (flows/signals.py) records the signal here, then raises KeyboardInterrupt. That
exception can be lost: code that calls back into Python from C or Rust and drops the callback's exception (pydantic's
schema building while a module is imported was seen to), a finalizer, a library's bare `except:`. The command would
then go on and finish as if nothing had been sent. So the places where work starts (each stage: solrl_core/stages/
registry.py) call `check()`, which raises KeyboardInterrupt again while a recorded stop has not reached the command's
top (`handled()`): forward execution reaches them only when the first one was lost (a stop on its way up runs
`finally` blocks, not new stages). In a process without such a handler (a Dask worker, a torchrun rank), nothing is
ever recorded and `check()` does nothing.
"""

from __future__ import annotations

_requested: list[int] = []  # the signal of the stop under way, while it has not reached the command's top


def request(signum: int) -> None:
    """Record a stop asked for by signal `signum` (the first one wins: it gives the exit code)."""
    if not _requested:
        _requested.append(int(signum))


def requested() -> int | None:
    """The signal of the stop under way, or None."""
    return _requested[0] if _requested else None


def handled() -> None:
    """The stop reached the command's top (it exits now): nothing is under way any more."""
    _requested.clear()


def check() -> None:
    """Raise KeyboardInterrupt when a stop was asked for and has not reached the command's top (it was lost on the
    way: see the module's docstring)."""
    if _requested:
        raise KeyboardInterrupt(f"signal {_requested[0]} (asked for earlier; its first interrupt was lost)")
