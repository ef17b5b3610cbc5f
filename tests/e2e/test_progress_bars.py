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

from cli_processes import SMALLER_RUN, tracking_set
from repo_paths import ROOT, TINY
from screen_replay import BARS, rows_per_bar


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
    code, output = run_in_pty([sys.executable, "-m", "solrl", "train", str(TINY), *SMALLER_RUN, "--iterations", "1",
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
