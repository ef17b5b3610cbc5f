"""How counts read in what the terminal prints: "1 iteration", "2 iterations"."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """`count` and `noun`, the noun in the plural unless count is 1 (`many`: an irregular plural)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def duration(seconds: float) -> str:
    """A duration as people say it: "42 s", "3 min 05 s", "1 h 02 min"."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
