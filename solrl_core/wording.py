"""How counts read in what the terminal prints: "1 iteration", "2 iterations"."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """`count` and `noun`, the noun in the plural unless count is 1 (`many`: an irregular plural)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"
