"""Faults a user causes end with one line `solrl: error: ...` naming what to fix, exit 2, no traceback, and leave
nothing behind, checked in process: unreadable configs, run directories that cannot be written, a read-only sqlite
store, OS errors a user fixes (bugs keep their traceback), absent devices and a full disk (through the CLI:
tests/e2e/test_user_faults.py)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from cli_processes import assert_one_line_error, folder_entries
from played_gpus import play_cuda_devices
from repo_paths import TINY
from solrl_core import userfiles


def run_main(capsys, *args: str) -> tuple[int, str]:
    """`solrl ARGS` in this process (so a test can simulate what the OS would do); (exit status, stderr)."""
    from solrl.cli.main import main

    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err


def assert_one_line(code: int, err: str, *needles: str) -> None:
    class Proc:  # the shape assert_one_line_error reads
        returncode, stderr = code, err

    assert_one_line_error(Proc, *needles)


def test_config_unreadable(capsys, tmp_path, monkeypatch):
    """Permission denied (simulated: chmod does not stop root, who may run the tests)."""
    config = tmp_path / "secret.yaml"
    config.write_text(f"extends: {TINY}\n")
    real = userfiles._read_regular  # how a user's file is opened (without blocking on a FIFO)

    def read_regular(path):
        if Path(path) == config:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(userfiles, "_read_regular", read_regular)
    code, err = run_main(capsys, "train", str(config), "--run-dir", str(tmp_path / "r"))
    assert_one_line(code, err, str(config), "Permission denied", "permissions")
    assert not (tmp_path / "r").exists()


def test_run_dir_not_writable(capsys, tmp_path, monkeypatch):
    """The folder the run directory would be made in is read-only: the check names it before any work. Root
    ignores permission bits, so the OS's answer for a non-root user is simulated there."""
    parent = tmp_path / "readonly"
    parent.mkdir()
    parent.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == parent else real(p, mode, **kw))
    try:
        code, err = run_main(capsys, "train", str(TINY), "--run-dir", str(parent / "run"))
    finally:
        parent.chmod(0o755)
    assert_one_line(code, err, str(parent), "cannot write", "--run-dir")
    assert folder_entries(parent) == []


def test_run_dir_permission_denied_at_creation(capsys, tmp_path, monkeypatch):
    """What the ahead-of-time check cannot see (e.g. an ACL): the EACCES of mkdir itself, named with its path."""
    target = tmp_path / "run"
    real = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self == target:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    from solrl_core.errors import SolrlError
    from solrl_core.run.rundir import RunDir

    with pytest.raises(SolrlError, match="Permission denied") as info, RunDir(target).hold():
        pass
    assert str(target) in str(info.value) and "\n" not in str(info.value)


def test_sqlite_store_in_read_only_folder(tmp_path, monkeypatch):
    """Root ignores permission bits, so there the OS's answer for a non-root user is simulated."""
    from solrl.flows.service_checks import check_tracking_store
    from solrl_core.errors import SolrlError

    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == folder else real(p, mode, **kw))
    try:
        with pytest.raises(SolrlError, match="cannot write to") as info:
            check_tracking_store(f"sqlite:///{folder / 'x.db'}")
    finally:
        folder.chmod(0o755)
    assert str(folder) in str(info.value) and "tracking.uri" in str(info.value)


# ---- the error boundary -----------------------------------------------------------------------------------------
def test_main_maps_user_os_errors_and_keeps_bugs(capsys, monkeypatch, tmp_path):
    """main() turns a full disk or a permission error anywhere into one line naming the path; any other OSError (a
    bug, or nothing the user can fix) keeps its traceback."""
    import solrl.cli.commands.runs

    def failing(error):
        def command(args):
            raise error
        return command

    target = tmp_path / "iter_0000" / "pool.zarr"
    monkeypatch.setattr(solrl.cli.commands.runs, "cmd_status", failing(OSError(errno.ENOSPC, "No space left on device",
                                                                 str(target))))
    code, err = run_main(capsys, "status", "--run-dir", str(tmp_path))
    assert_one_line(code, err, "no space left", str(target), "free")
    monkeypatch.setattr(solrl.cli.commands.runs, "cmd_status", failing(PermissionError(errno.EACCES, "Permission denied",
                                                                         str(target))))
    code, err = run_main(capsys, "status", "--run-dir", str(tmp_path))
    assert_one_line(code, err, "Permission denied", str(target))
    monkeypatch.setattr(solrl.cli.commands.runs, "cmd_status", failing(OSError(errno.EIO, "Input/output error", str(target))))
    with pytest.raises(OSError, match="Input/output"):
        run_main(capsys, "status", "--run-dir", str(tmp_path))


def test_prefect_logs_of_user_errors_are_hidden_and_others_kept():
    """Prefect's records of a run that failed with a user error are dropped (main() prints the one line); a retry
    and any other failure keep theirs."""
    import logging

    from solrl.flows.user_errors import _HideUserErrors
    from solrl_core.errors import MissingInputError

    def record(message, exc=None):
        return logging.LogRecord("prefect.task_runs", logging.ERROR, __file__, 1, message, None,
                                 (type(exc), exc, None) if exc else None)

    keep = _HideUserErrors().filter
    assert not keep(record("Encountered exception during execution", MissingInputError("x")))
    assert not keep(record("Finished in state Failed('Task run encountered an exception MissingInputError: x')"))
    assert not keep(record("Finished in state Failed(\"OSError: [Errno 28] No space left on device: 'a'\")"))
    assert keep(record("Encountered exception during execution", RuntimeError("a bug")))
    assert keep(record("Finished in state Failed('Task run encountered an exception RuntimeError: a bug')"))
    assert keep(record("Task run failed with exception: MissingInputError('x') - Retry 1/1 will start now",
                       MissingInputError("x")))


def test_fewer_gpus_than_the_device_named(monkeypatch):
    """A machine with 2 GPUs (as torch reports them) and model.device cuda:3: the line lists what is present."""
    from solrl_core.errors import SolrlError
    from solrl_core.placement import check_present

    play_cuda_devices(monkeypatch, 2)
    check_present("cuda:1", "model.device")
    check_present("cuda", "model.device")
    with pytest.raises(SolrlError, match=r"model.device is cuda:3, .* 2 CUDA device\(s\), cuda:0 to cuda:1"):
        check_present("cuda:3", "model.device")


def test_disk_full_says_what_the_stage_needs(tmp_path):
    """Past iteration 0 the stage's previous artifact is the estimate of what it needs."""
    from solrl_core.errors import SolrlError
    from solrl_core.run.rundir import RunDir
    from solrl_core.userfiles import user_os_errors
    from solrl.tasks.stage_task import _space_needed

    run = RunDir(tmp_path)
    previous = run.stage_dir(0, "explore")
    previous.mkdir(parents=True)
    (previous / "pool.bin").write_bytes(b"\0" * 3 * 1024 * 1024)
    run.complete(0, "explore")
    assert _space_needed(run, 0, "explore") is None
    with pytest.raises(SolrlError) as info, user_os_errors("stage explore of iteration 1",
                                                           lambda: _space_needed(run, 1, "explore")):
        raise OSError(errno.ENOSPC, "No space left on device", str(run.partial_dir(1, "explore") / "x"))
    message = str(info.value)
    assert "stage explore of iteration 1: no space left" in message and "explore.partial/x" in message
    assert "needs about 3.0 MiB (as iteration 0's)" in message and " free" in message


def test_a_full_disk_error_without_a_path_measures_the_run_directorys_disk(tmp_path, monkeypatch):
    """zarr's and safetensors' ENOSPC name no file: the free space said is the run directory's disk (where the stage
    writes), not the working directory's; without a folder, no figure at all rather than another disk's."""
    from solrl_core import userfiles
    from solrl_core.errors import SolrlError

    real = userfiles.shutil.disk_usage
    monkeypatch.setattr(userfiles.shutil, "disk_usage",
                        lambda path: real(path)._replace(free=4096 if Path(path) == tmp_path else 10 << 30))
    for folder, said in ((tmp_path, f"writing a file in {tmp_path} (4.0 KiB free)"), (None, "writing a file;")):
        with pytest.raises(SolrlError) as info, userfiles.user_os_errors("stage regenerate of iteration 1",
                                                                         folder=folder):
            raise OSError(errno.ENOSPC, "No space left on device")
        assert said in str(info.value) and "10.0 GiB" not in str(info.value), str(info.value)
