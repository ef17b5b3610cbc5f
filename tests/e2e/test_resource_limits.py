"""A `ulimit` too low for solrl ends `solrl train` in one line that names the limit and how to raise it, before any
work (solrl_core/resource_limits.py): a hard open-file limit, an address-space limit, a file-size limit."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from cli_processes import assert_one_line_error, folder_entries
from repo_paths import ROOT, TINY

MiB = 1024**2


def _limited(which: int, value: int):
    def preexec():
        resource.setrlimit(which, (value, value))
    return preexec


@pytest.mark.e2e
@pytest.mark.parametrize("which, value, needles", [
    (resource.RLIMIT_NOFILE, 32, ("at most 32 files", "ulimit -n 4096")),
    (resource.RLIMIT_AS, 3 * 1024 * MiB, ("3.0 GiB of address space", "ulimit -v unlimited")),
    (resource.RLIMIT_FSIZE, 2 * MiB, ("files of at most 2.0 MiB", "ulimit -f unlimited")),
], ids=["open-files", "address-space", "file-size"])
def test_a_limit_too_low_is_one_line_before_any_work(session_env, tmp_path, which, value, needles):
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "solrl", "train", str(TINY), "--run-dir", str(run_dir)],
                          env=session_env, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          preexec_fn=_limited(which, value))
    assert_one_line_error(proc, *needles, "run the same command again")
    assert not run_dir.exists() or folder_entries(run_dir) == []
