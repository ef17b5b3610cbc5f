"""One short line per finished stage when the progress bars are off (`solrl train --no-progress`), so that a run
without bars still shows where it is: `iteration 3 (of 10) explore done (12.3 s)`. Nothing under --quiet (the CLI sets
Prefect's console log level to ERROR for it: the one setting the flows can read) and nothing while bars show (they
say the same).

Written straight to stdout, not through `print`: the iteration flow logs its prints (`log_prints`), which the
console shows only from WARNING up.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager

QUIET_VARIABLE, QUIET_LEVEL = "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "ERROR"  # what flows/cli.py sets for --quiet


def stage_lines_wanted(progress: bool) -> bool:
    """Whether finished stages print a line: progress bars off, and not --quiet."""
    return not progress and os.environ.get(QUIET_VARIABLE, "").upper() != QUIET_LEVEL


def stage_line(what: str, seconds: float, iteration: int | None = None, iterations: int | None = None) -> str:
    """`iteration 3 (of 10) explore done (12.3 s)`: the iteration numbered as everywhere else (from 0, as `solrl stage
    --iteration` takes it), out of the run's `iterations` when given; `evaluation after 5 iterations done (4.0 s)`
    when there is no iteration."""
    where = "" if iteration is None else f"iteration {iteration} " if iterations is None else \
        f"iteration {iteration} (of {iterations}) "
    return f"{where}{what} done ({seconds:.1f} s)"


@contextmanager
def stage_done(progress: bool, what: str, iteration: int | None = None, iterations: int | None = None):
    """Times the block and, when `stage_lines_wanted(progress)`, writes its `stage_line` once it finished (not when
    it raised: the error says what happened)."""
    start = time.perf_counter()
    yield
    if stage_lines_wanted(progress):
        sys.stdout.write(stage_line(what, time.perf_counter() - start, iteration, iterations) + "\n")
        sys.stdout.flush()
