"""Short excerpts of what a user gave, for error messages: a message quotes at most EXCERPT_CHARS of a value and an
error line is at most LINE_CHARS long, so a huge value (a 10 MB prompt line, a YAML alias bomb that expands to
billions of values) cannot make a huge error line, nor take minutes to format one.

excerpt(value)     a bounded repr of `value`: nested containers shown a few items and levels deep, cut to EXCERPT_CHARS
cut(text)          `text` cut to EXCERPT_CHARS (or `limit`), ending in "…" when it was cut
one_line(message)  `message` on one line of at most LINE_CHARS: over that, its middle is cut (its start says what is
                   wrong, its end what to do)
"""

from __future__ import annotations

import reprlib

EXCERPT_CHARS = 200  # of one value quoted in a message
LINE_CHARS = 1000  # of a whole error line
ELLIPSIS = "…"

_REPR = reprlib.Repr()  # reads only the first few items of each container: bounded work, whatever the value's size
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = _REPR.maxdeque = _REPR.maxarray = 8
_REPR.maxdict = 8
_REPR.maxstring = EXCERPT_CHARS
_REPR.maxlong = 40
_REPR.maxother = EXCERPT_CHARS


def cut(text: str, limit: int = EXCERPT_CHARS) -> str:
    """`text` if it has at most `limit` characters, else its first `limit` - 1 and "…"."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def excerpt(value, limit: int = EXCERPT_CHARS) -> str:
    """The repr of `value`, bounded: at most `limit` characters, computed from a few items of each container."""
    return cut(_REPR.repr(value), limit)


def one_line(message: str, limit: int = LINE_CHARS) -> str:
    """`message` as one line (its line breaks become spaces) of at most `limit` characters: a longer one keeps its
    start and its end, and says how much of its middle was cut."""
    line = " ".join(str(message).split("\n")).replace("\r", " ")
    if len(line) <= limit:
        return line
    def note(n: int) -> str:
        return f" {ELLIPSIS} ({n:,} characters cut) {ELLIPSIS} "

    tail = limit // 3
    head = max(0, limit - tail - len(note(len(line))))  # the note's widest count: at most len(line) cut
    return line[:head] + note(len(line) - head - tail) + line[len(line) - tail:]
