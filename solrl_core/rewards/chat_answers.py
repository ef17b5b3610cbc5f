"""From a chat model's answer to a score: the parsers a VLM judge (solrl_core/rewards/chat_judge.py) names.

`number`        the first number in the answer ("8", "Score: 8/10", "7.5 out of 10"), kept only inside the judge's
                score range and mapped onto 0..1 by it
`yes_no`        1 for an answer starting "yes", 0 for one starting "no" (case, spaces and punctuation aside)
`regex:PATTERN` the first group of PATTERN's first match read as a number, then as `number` (for answers that reason
                first: "regex:Final score:\\s*([0-9.]+)")

A parser gives None for an answer it cannot read; the judge counts it and asks again, never scores it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from solrl_core.errors import SolrlError

NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
YES_NO = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)
PARSERS = ("number", "yes_no", "regex:PATTERN")


@dataclass(frozen=True)
class ScoreRange:
    """The scale the judge is asked to answer on; a score is (value - low) / (high - low)."""

    low: float
    high: float

    def normalise(self, value: float) -> float | None:
        if not self.low <= value <= self.high:
            return None
        return (value - self.low) / (self.high - self.low)


def answer_parser(name: str, scale: ScoreRange) -> Callable[[str], float | None]:
    """The parser `name` (one of PARSERS) on `scale`; SolrlError in one line for an unknown name or a bad pattern."""
    if name == "number":
        return lambda answer: _number(NUMBER.search(answer), 0, scale)
    if name == "yes_no":
        return _yes_no
    if name.startswith("regex:"):
        try:
            pattern = re.compile(name[len("regex:"):], re.IGNORECASE | re.DOTALL)
        except re.error as exc:
            raise SolrlError(f"parser {name!r}: not a regular expression ({exc})") from None
        if pattern.groups != 1:
            raise SolrlError(f"parser {name!r}: the pattern needs exactly one group, the score "
                             f"(it has {pattern.groups})")
        return lambda answer: _number(pattern.search(answer), 1, scale)
    raise SolrlError(f"unknown parser {name!r} (known: {', '.join(PARSERS)})")


def _number(match: re.Match | None, group: int, scale: ScoreRange) -> float | None:
    if match is None:
        return None
    try:
        value = float(match.group(group))
    except ValueError:
        return None
    return scale.normalise(value)


def _yes_no(answer: str) -> float | None:
    match = YES_NO.match(answer)
    if match is None:
        return None
    return 1.0 if match.group(1).lower() == "yes" else 0.0
