"""Faults a user causes or fixes end with one line `solrl: error: ...` naming what to fix, exit 2, no traceback, and
leave nothing behind, through the CLI: unreadable files, unusable run directories, a full disk, empty configs,
iterations out of range, absent devices, and Prefect/MLflow servers that do not answer (checked before any work
starts). The same faults in process: tests/unit/cli/test_user_faults_in_process.py."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
import torch

from cli_processes import assert_one_line_error, folder_entries, free_port, solrl
from repo_paths import ROOT, TINY

DEMO = ROOT / "configs" / "demo.yaml"


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A run directory holding only its frozen config (the demo's: 24 iterations), as `solrl train` freezes it."""
    return frozen_run(tmp_path / "run")


def frozen_run(root: Path, overrides: list[str] | None = None) -> Path:
    """`root` as a run directory that has computed nothing: the demo's config (with `overrides`) frozen into it."""
    from solrl_core.config.loading import load_config
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_config import prepare_run

    prepare_run(RunDir(root), load_config(DEMO, overrides or []))
    return root


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


def test_config_unreadable_for_real(session_env, tmp_path):
    """As root too: the command runs without the capabilities that let root read any file (procs.unprivileged)."""
    import subprocess

    from solrl_core.lab.faults.procs import unprivileged

    config = tmp_path / "secret.yaml"
    config.write_text(f"extends: {TINY}\n")
    config.chmod(0)
    argv = unprivileged([sys.executable, "-m", "solrl", "train", str(config), "--run-dir", str(tmp_path / "r")])
    proc = subprocess.run(argv, env=session_env, cwd=ROOT, capture_output=True, text=True, timeout=300)
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


# ---- a full disk while a stage writes ---------------------------------------------------------------------------
ENOSPC_SCRIPT = """
import sys
import safetensors.torch
from safetensors import SafetensorError
def no_space(tensors, filename, metadata=None):  # what safetensors raises when the disk is full
    raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
safetensors.torch.save_file = no_space  # every local safetensors write: checkpoints, adapters
from solrl.cli.main import main
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
    before = folder_entries(run_dir)
    proc = run_cli(*args[:-2], "--run-dir", str(run_dir), *args[-2:], check=False)
    assert_one_line_error(proc, *needles)
    assert "quantize --run-dir" not in proc.stderr  # no advice to run a stage of iteration -1
    assert folder_entries(run_dir) == before  # no iter_-001/


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
    frozen_run(run_dir, [f"orchestration.devices=[cpu, '{absent}']"])
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
