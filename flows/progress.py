"""One short line per finished stage when the progress bars are off (`solrl train --no-progress`), so that a run
without bars still shows where it is: `iteration 3 (of 10) explore done (12.3 s)`; and, bars or not, one line per
finished iteration with its rewards and the time left (`IterationClock`). Nothing under --quiet (the CLI sets
Prefect's console log level to ERROR for it: the one setting the flows can read); no stage lines while bars show (they
say the same).

Written straight to stdout, not through `print`: the iteration flow logs its prints (`log_prints`), which the
console shows only from WARNING up.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager

from solrl_core.wording import duration

QUIET_VARIABLE, QUIET_LEVEL = "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "ERROR"  # what solrl/cli/main.py sets for --quiet


def stage_lines_wanted(progress: bool) -> bool:
    """Whether finished stages print a line: progress bars off, and not --quiet."""
    return not progress and not quiet()


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


def quiet() -> bool:
    """--quiet: the CLI set Prefect's console level to ERROR."""
    return os.environ.get(QUIET_VARIABLE, "").upper() == QUIET_LEVEL


class IterationClock:
    """The whole run in the terminal: after each iteration, `iteration 3 (of 10) done in 12.3 s: explore reward
    0.712, train reward 0.744, loss 0.0123; about 1 min 26 s left`. The time left is the time this command has spent
    per iteration it computed (its evaluations included) times the iterations still to run; an iteration a resumed
    run had finished before counts for nothing."""

    def __init__(self, iterations: int):
        self.iterations = iterations
        self.spent = 0.0  # on the iterations computed here, and what came between them
        self.computed = 0
        self.begun = self.mark = time.perf_counter()

    def begin(self) -> None:
        """An iteration starts: what came since the last one (an evaluation) counts to the run's time."""
        now = time.perf_counter()
        if self.computed:
            self.spent += now - self.mark
        self.begun = self.mark = now

    def line(self, iteration: int, metrics: dict[str, float], computed: bool = True) -> str:
        now = time.perf_counter()
        seconds, self.mark = now - self.begun, now
        if computed:
            self.spent += seconds
            self.computed += 1
        left = self.iterations - iteration - 1
        rewards = (f"explore reward {metrics['reward/explore_mean']:.3f}, train reward "
                   f"{metrics['reward/train_mean']:.3f}, loss {metrics['loss/total']:.4g}")
        took = f"done in {seconds:.1f} s" if computed else "done before (resumed)"
        eta = f"; about {duration(left * self.spent / self.computed)} left" if left and self.computed else ""
        return f"iteration {iteration} (of {self.iterations}) {took}: {rewards}{eta}"

    def say(self, iteration: int, metrics: dict[str, float], computed: bool = True) -> None:
        line = self.line(iteration, metrics, computed)
        if not quiet():
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
