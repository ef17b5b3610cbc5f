"""Faults a user causes or fixes end with one line `solrl: error: ...` naming what to fix, exit 2, no traceback, and
leave nothing behind: unreadable files, unusable run directories, a full disk, empty configs, iterations out of range,
absent devices, and Prefect/MLflow servers that do not answer (checked before any work starts)."""

from __future__ import annotations

import errno
import os
import socket
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT, TINY, free_port, solrl
from test_cli_errors import assert_one_line_error
from solrl_core import userfiles

DEMO = ROOT / "configs" / "demo.yaml"


def run_main(capsys, *args: str) -> tuple[int, str]:
    """`solrl ARGS` in this process (so a test can simulate what the OS would do); (exit status, stderr)."""
    from flows.cli import main

    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err


def assert_one_line(code: int, err: str, *needles: str) -> None:
    class Proc:  # the shape assert_one_line_error reads
        returncode, stderr = code, err

    assert_one_line_error(Proc, *needles)


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A run directory holding only its frozen config (the demo's: 24 iterations)."""
    root = tmp_path / "run"
    root.mkdir()
    (root / "config.yaml").write_text(DEMO.read_text())
    return root


def _entries(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


# ---- files the user names ---------------------------------------------------------------------------------------
def test_config_not_utf8(run_cli, tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(f"extends: {TINY}\nname: caf\xe9\n".encode("latin-1"))
    proc = run_cli("train", str(bad), "--run-dir", str(tmp_path / "r"), check=False)
    assert_one_line_error(proc, str(bad), "not UTF-8", "line 2")
    assert not (tmp_path / "r").exists()


def test_config_is_a_directory(run_cli, tmp_path):
    proc = run_cli("train", str(tmp_path), "--run-dir", str(tmp_path / "r"), check=False)
    assert_one_line_error(proc, str(tmp_path), "is a directory")


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


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_config_unreadable_for_real(run_cli, tmp_path):
    config = tmp_path / "secret.yaml"
    config.write_text(f"extends: {TINY}\n")
    config.chmod(0)
    proc = run_cli("train", str(config), "--run-dir", str(tmp_path / "r"), check=False)
    assert_one_line_error(proc, str(config), "Permission denied")


@pytest.mark.parametrize("text, needle", [("", "is empty"), ("# nothing set yet\n", "is empty"),
                                          ("- a\n- b\n", "not a list"), ("just words\n", "mapping")])
def test_empty_or_non_mapping_config_is_refused(run_cli, tmp_path, text, needle):
    config = tmp_path / "c.yaml"
    config.write_text(text)
    proc = run_cli("train", str(config), "--run-dir", str(tmp_path / "r"), check=False)
    assert_one_line_error(proc, str(config), needle)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("kind", ["not-utf8", "directory", "jsonl-not-utf8"])
def test_prompt_file_unreadable(run_cli, tmp_path, kind):
    if kind == "directory":
        prompts = tmp_path / "prompts"
        prompts.mkdir()
        needle = "is a directory"
    else:
        prompts = tmp_path / ("p.jsonl" if kind.startswith("jsonl") else "p.txt")
        prompts.write_bytes(b'{"prompt": "a red circle"}\n{"prompt": "caf\xe9"}\n' if kind.startswith("jsonl")
                            else b"a red circle\ncaf\xe9\n")
        needle = "not UTF-8"
    proc = run_cli("train", str(TINY), "--run-dir", str(tmp_path / "r"), "--set", f"prompts.train={prompts}",
                   check=False)
    assert_one_line_error(proc, "prompts.train", str(prompts), needle)
    assert not (tmp_path / "r").exists()


# ---- the run directory ------------------------------------------------------------------------------------------
def test_run_dir_is_a_file(run_cli, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    proc = run_cli("train", str(TINY), "--run-dir", str(afile), check=False)
    assert_one_line_error(proc, str(afile), "is a file")
    proc = run_cli("train", str(TINY), "--run-dir", str(afile / "run"), check=False)
    assert_one_line_error(proc, str(afile), "is a file")
    assert afile.read_text() == "keep me"


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
    assert _entries(parent) == []


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


# ---- a full disk while a stage writes ---------------------------------------------------------------------------
ENOSPC_SCRIPT = """
import sys
import safetensors.torch
from safetensors import SafetensorError
def no_space(tensors, filename, metadata=None):  # what safetensors raises when the disk is full
    raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
safetensors.torch.save_file = no_space  # every local safetensors write: checkpoints, adapters
from flows.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_disk_full_in_a_stage_names_the_path_and_free_space(session_env, run_dir):
    """ENOSPC raised inside the stage's Prefect task (simulated: no tmpfs without privileges) reaches the terminal
    as one line naming the path and the free space, after Prefect's own logs of the failure, and is not retried."""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", ENOSPC_SCRIPT, "stage", "quantize", "--run-dir", str(run_dir),
                           "--iteration", "0"], env=session_env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert_one_line_error(proc, "no space left", "adapters.safetensors", "free", "stage quantize of iteration 0")
    assert not (run_dir / "iter_0000" / "manifests" / "quantize.json").exists()  # not complete


# ---- iterations out of range ------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, needles", [
    (["stage", "quantize", "--iteration", "-1"], ["--iteration -1", "0 to 23"]),
    (["stage", "explore", "--iteration", "-1"], ["--iteration -1", "0 to 23"]),
    (["stage", "quantize", "--iteration", "24"], ["--iteration 24", "0 to 23"]),
    (["inspect", "--iteration", "-1"], ["--iteration -1", "0 to 23"]),
    (["eval", "--step", "-1"], ["--step -1", "0 (before training) to 24"]),
    (["eval", "--step", "25"], ["--step 25", "to 24"]),
    (["update-node", "--iteration", "-2"], ["--iteration -2", "0 to 23"]),
])
def test_iteration_out_of_range(run_cli, run_dir, args, needles):
    proc = run_cli(*args[:-2], "--run-dir", str(run_dir), *args[-2:], check=False)
    assert_one_line_error(proc, *needles)
    assert "quantize --run-dir" not in proc.stderr  # no advice to run a stage of iteration -1
    assert _entries(run_dir) == ["config.yaml"]  # no iter_-001/


@pytest.mark.parametrize("count", ["0", "-3"])
def test_train_iterations_out_of_range(run_cli, tmp_path, count):
    proc = run_cli("train", str(TINY), "--run-dir", str(tmp_path / "r"), "--iterations", count, check=False)
    assert_one_line_error(proc, f"--iterations {count}", "1 or more")
    assert not (tmp_path / "r").exists()


# ---- devices ----------------------------------------------------------------------------------------------------
def test_device_not_present(run_cli, tmp_path, run_dir):
    absent = f"cuda:{torch.cuda.device_count()}"  # one past the last GPU: cuda:0 on a machine without one
    proc = run_cli("train", str(TINY), "--run-dir", str(tmp_path / "r"), "--set", f"model.device={absent}",
                   check=False)
    assert_one_line_error(proc, "model.device", absent, "CUDA device")
    assert not (tmp_path / "r").exists()
    proc = run_cli("train", str(TINY), "--run-dir", str(tmp_path / "r"), "--set", "model.device=gpu", check=False)
    assert_one_line_error(proc, "model.device", "'gpu' is not a device")
    (run_dir / "config.yaml").write_text(DEMO.read_text() + f"\norchestration: {{devices: [cpu, '{absent}']}}\n")
    proc = run_cli("stage", "quantize", "--run-dir", str(run_dir), "--iteration", "0", check=False)
    assert_one_line_error(proc, "orchestration.devices", absent)


# ---- servers that do not answer ---------------------------------------------------------------------------------
@pytest.fixture
def silent_port():
    """A port that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def test_prefect_api_not_answering(session_env, tmp_path, silent_port):
    for url in (f"http://127.0.0.1:{free_port()}/api", f"http://127.0.0.1:{silent_port}/api"):
        env = {**session_env, "PREFECT_API_URL": url}
        proc = solrl(env, "train", str(TINY), "--run-dir", str(tmp_path / "r"), check=False, timeout=120)
        assert_one_line_error(proc, "PREFECT_API_URL", url)
        assert not (tmp_path / "r").exists()


def test_mlflow_server_not_answering(run_cli, tmp_path, silent_port):
    for uri in (f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{silent_port}"):
        proc = run_cli("train", str(TINY), "--run-dir", str(tmp_path / "r"), "--set", f"tracking.uri={uri}",
                       check=False, timeout=120)
        assert_one_line_error(proc, "tracking.uri", uri, "no MLflow server answers")
        assert not (tmp_path / "r").exists()


def test_sqlite_store_in_missing_folder(run_cli, tmp_path):
    uri = f"sqlite:///{tmp_path / 'missing' / 'x.db'}"
    proc = run_cli("train", str(TINY), "--run-dir", str(tmp_path / "r"), "--set", f"tracking.uri={uri}",
                   check=False, timeout=120)
    assert_one_line_error(proc, "tracking.uri", uri, "does not exist")
    assert not (tmp_path / "r").exists()


def test_sqlite_store_in_read_only_folder(tmp_path, monkeypatch):
    """Root ignores permission bits, so there the OS's answer for a non-root user is simulated."""
    from flows.preflight import check_tracking_store
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
    import flows.commands.runs

    def failing(error):
        def command(args):
            raise error
        return command

    target = tmp_path / "iter_0000" / "pool.zarr"
    monkeypatch.setattr(flows.commands.runs, "cmd_status", failing(OSError(errno.ENOSPC, "No space left on device",
                                                                 str(target))))
    code, err = run_main(capsys, "status", "--run-dir", str(tmp_path))
    assert_one_line(code, err, "no space left", str(target), "free")
    monkeypatch.setattr(flows.commands.runs, "cmd_status", failing(PermissionError(errno.EACCES, "Permission denied",
                                                                         str(target))))
    code, err = run_main(capsys, "status", "--run-dir", str(tmp_path))
    assert_one_line(code, err, "Permission denied", str(target))
    monkeypatch.setattr(flows.commands.runs, "cmd_status", failing(OSError(errno.EIO, "Input/output error", str(target))))
    with pytest.raises(OSError, match="Input/output"):
        run_main(capsys, "status", "--run-dir", str(tmp_path))


def test_prefect_logs_of_user_errors_are_hidden_and_others_kept():
    """Prefect's records of a run that failed with a user error are dropped (main() prints the one line); a retry
    and any other failure keep theirs."""
    import logging

    from flows.user_errors import _HideUserErrors
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

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_present("cuda:1", "model.device")
    check_present("cuda", "model.device")
    with pytest.raises(SolrlError, match=r"model.device is cuda:3, .* 2 CUDA device\(s\), cuda:0 to cuda:1"):
        check_present("cuda:3", "model.device")


def test_disk_full_says_what_the_stage_needs(tmp_path):
    """Past iteration 0 the stage's previous artifact is the estimate of what it needs."""
    from solrl_core.errors import SolrlError
    from solrl_core.run.rundir import RunDir
    from tasks.stage_task import _space_needed
    from solrl_core.userfiles import user_os_errors

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
