"""Progress bars on a terminal: `solrl train` under a pseudo-terminal shows one bar per stage, redrawn in place, on
one device and with the sampling and scoring split over two Dask worker processes (whose own bars would not reach
this terminal: the stage's process draws one bar for all shards)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from conftest import ROOT, TINY, tracking_set

# Each stage's bar label, as it starts a line (the sampling bars name precision and steps in brackets).
BARS = {
    "explore": r"explore it0 \(",
    "score_explore": r"score explore it0:",
    "regenerate": r"regenerate it0 \(",
    "score_final": r"score regenerated? it0:",
    "update": r"update it0:",
}


def run_in_pty(args: list[str], env: dict[str, str], timeout: float = 600) -> tuple[int, str]:
    """Run `args` with stdin, stdout and stderr on a pseudo-terminal 160 columns wide; (exit code, what it wrote)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT, start_new_session=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
        return proc.wait(timeout=30), b"".join(chunks).decode(errors="replace")
    finally:
        os.close(master)


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


def assert_one_bar_per_stage_in_place(output: str, stages) -> None:
    """A bar for each of `stages`, each on one line redrawn in place up to its total; no other stage's bar."""
    seen = rows_per_bar(output)
    assert {stage for stage, rows in seen.items() if rows} == set(stages), output[-3000:]
    for stage in stages:
        rows = seen[stage]
        assert len(rows) == 1, f"the {stage} bar was drawn on {len(rows)} lines, not redrawn in place: {rows}"
        (drawn,) = rows.values()
        assert any(re.search(r"\b(\d+)/\1 \[", text) for text in drawn), f"{stage} never reached its total: {drawn}"


def train_in_pty(session_env: dict[str, str], run_dir, *overrides: str) -> str:
    env = {**session_env, "TERM": "xterm"}
    code, output = run_in_pty([sys.executable, "-m", "flows.cli", "train", str(TINY), "--iterations", "1",
                               "--run-dir", str(run_dir), *tracking_set(session_env), *overrides], env)
    assert code == 0, output[-4000:]
    assert "trained 1 iteration" in output
    return output


@pytest.mark.e2e
def test_one_bar_per_stage_on_one_device(session_env, tmp_path):
    """The pool is scored while it samples (score.overlap): the sampling bar is that stage's one line, and the
    score stages find nothing left to score."""
    output = train_in_pty(session_env, tmp_path / "run")
    assert_one_bar_per_stage_in_place(output, ["explore", "regenerate", "update"])


@pytest.mark.e2e
def test_one_bar_per_stage_when_stages_are_split_over_dask_workers(session_env, tmp_path):
    output = train_in_pty(session_env, tmp_path / "run", "--set", "orchestration.devices=[cpu, cpu]")
    assert_one_bar_per_stage_in_place(output, list(BARS))
    assert " shard " not in output  # the shards' processes draw nothing of their own


def test_the_screen_replay_tells_a_bar_redrawn_in_place_from_one_printed_line_by_line():
    in_place = "\rexplore it0 (fp32):  50%|#   | 1/2 [00:01]\rexplore it0 (fp32): 100%|####| 2/2 [00:02]\n"
    seen = rows_per_bar(in_place)
    assert list(seen["explore"]) == [0] and not seen["update"]
    assert len(rows_per_bar(in_place.replace("\r", "\n"))["explore"]) == 2  # a new line per redraw
    nested = "\rscore explore it0: 0%\n\rexplore it0 (fp32): 1/2\x1b[A\n\rexplore it0 (fp32): 2/2\x1b[A"
    seen = rows_per_bar(nested)  # tqdm's second bar: one line down, drawn, back up
    assert list(seen["explore"]) == [1] and list(seen["score_explore"]) == [0]
