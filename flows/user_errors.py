"""How errors the user can fix reach the terminal: one line, `solrl: error: ...` (at most LINE_CHARS long), exit 2,
no traceback.

A user error raised inside a flow or task reaches `solrl`'s main() unchanged, but Prefect first logs it (the
exception with its traceback, then the run's final Failed state). `hide_user_error_logs` drops those records on the
flow and task run loggers, so main()'s line is the only one. The run's state in the Prefect UI still carries the
message. Any other exception is logged and raised as before, with its traceback.
"""

from __future__ import annotations

import logging
import re
import sys

from solrl_core.errors import SolrlError
from solrl_core.excerpts import LINE_CHARS, one_line
from solrl_core.redaction import redact_text
from solrl_core.resource_limits import limit_error
from solrl_core.userfiles import USER_ERRNOS, user_os_error

EXIT_USER_ERROR = 2
_RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


def as_user_error(exc: BaseException) -> SolrlError | None:
    """`exc` as the one-line error the user can fix, or None when it is not one (a bug: keep its traceback)."""
    if isinstance(exc, SolrlError):
        return exc
    limited = limit_error(exc)  # a `ulimit` reached: named in one line (solrl_core/resource_limits.py)
    if limited is not None:
        return limited
    if isinstance(exc, OSError):
        return user_os_error(exc)
    return None


def report(error: SolrlError) -> int:
    """Print `error` as the command's one line on stderr, at most LINE_CHARS long whatever it quotes (a message that
    echoes a huge value is cut in the middle: solrl_core/excerpts.py); the exit status of a user error."""
    message = redact_text(str(error))  # an OSError's file name may be a URL too
    say(f"solrl: error: {one_line(message, LINE_CHARS - len('solrl: error: '))}")
    return EXIT_USER_ERROR


def say(line: str) -> None:
    """Print the command's last `line` on stderr; nothing when stderr is gone (SIGHUP: the terminal closed; a closed
    pipe), as there is no one left to read it."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _subclasses(cls: type) -> set[type]:
    out = {cls}
    for sub in cls.__subclasses__():
        out |= _subclasses(sub)
    return out


def _names_pattern() -> re.Pattern:
    """What Prefect's Failed-state lines say of a user error: its class name, or a user errno."""
    names = "|".join(sorted(c.__name__ for c in _subclasses(SolrlError)))
    errnos = "|".join(str(e) for e in sorted(USER_ERRNOS))
    return re.compile(rf"\b(?:{names})\b[:(]|\[Errno (?:{errnos})\]")


class _HideUserErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or " - Retry " in record.getMessage():  # a retry is news, not the end
            return True
        if record.exc_info and record.exc_info[1] is not None:
            return as_user_error(record.exc_info[1]) is None
        return not _names_pattern().search(record.getMessage())


def hide_user_error_logs() -> None:
    """Drop Prefect's log records of runs that failed with a user error (see the module docstring). Safe to call
    before Prefect is imported: its logging setup keeps the filters of existing loggers."""
    for name in _RUN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _HideUserErrors) for f in logger.filters):
            logger.addFilter(_HideUserErrors())
