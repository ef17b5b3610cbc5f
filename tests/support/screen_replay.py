"""A terminal's screen replayed from what `solrl train` printed to it (carriage returns, newlines, cursor up): on
which rows each stage's progress bar was drawn, and what each row showed (tests/e2e/test_progress_bars.py; the replay
itself: tests/unit/cli/test_screen_replay.py)."""

from __future__ import annotations

import re

# Each stage's bar label, as it starts a line (the sampling bars name precision and steps in brackets).
BARS = {
    "explore": r"explore it0 \(",
    "score_explore": r"score explore it0:",
    "regenerate": r"regenerate it0 \(",
    "score_final": r"score regenerated? it0:",
    "update": r"update it0:",
}


def rows_per_bar(output: str) -> dict[str, dict[int, list[str]]]:
    """Replay `output` on an endless screen (carriage return, newline, cursor up; other escapes ignored); for each
    bar of BARS, every screen row it was drawn on, with what that row showed each time the cursor left it."""
    screen: dict[int, list[str]] = {}
    row = col = 0
    seen: dict[str, dict[int, list[str]]] = {stage: {} for stage in BARS}

    def leave_row() -> None:
        text = "".join(screen.get(row, []))
        for stage, label in BARS.items():
            if re.match(label, text):
                seen[stage].setdefault(row, []).append(text)

    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b.|.", output, flags=re.S):
        if token == "\r":
            leave_row()
            col = 0
        elif token == "\n":
            leave_row()
            row, col = row + 1, 0
        elif token.startswith("\x1b["):
            if token.endswith("A"):
                leave_row()
                row -= int(token[2:-1] or 1)
        elif not token.startswith("\x1b"):
            line = screen.setdefault(row, [])
            line.extend(" " * (col - len(line)))
            if col < len(line):
                line[col] = token
            else:
                line.append(token)
            col += 1
    leave_row()
    return seen
