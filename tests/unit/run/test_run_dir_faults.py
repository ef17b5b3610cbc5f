"""Run-directory oddities end in one line (`solrl: error: ...`, exit 2, no traceback) naming the path and what to do,
and lose nothing: a name of the layout held by something of the other kind (a folder where solrl writes a file, or
the reverse), a garbled commit journal, a config.yaml of the user's own, a --run-dir that is a link to nowhere.

Each fault has its helper below; the run is a small one made in this process (no stage runs, no process starts):
the commands are refused before any work, in `solrl train`'s checks of the run directory or its commit recovery."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.errors import DamagedArtifactError
from solrl_core.learning_curve import CURVE_FILE
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import prepare_run


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """`solrl ARGS` in this process: (exit status, stdout, stderr)."""
    from solrl.cli.main import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(code: int, out: str, err: str, *needles: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("solrl: error: ") and out == "", (out, err)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under `root`: a file's digest, a folder, or a link's target (what 'nothing lost' compares)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = f"link to {os.readlink(path)}"
            elif path.is_dir():
                out[rel] = "folder"
            else:
                out[rel] = hashlib.blake2b(path.read_bytes(), digest_size=8).hexdigest()
    return out


def assert_nothing_lost(root: Path, before: dict[str, str]) -> None:
    """Every entry of `before` is still there as it was; the only new one may be the run's lock file."""
    after = snapshot(root)
    assert {rel: after.get(rel) for rel in before} == before
    assert set(after) - set(before) <= {".lock"}


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A private Prefect home and MLflow store: the commands stop before either is used."""
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    return ["--set", f"tracking.uri=sqlite:///{tmp_path / 'mlruns.db'}"]


@pytest.fixture
def run(tmp_path, env) -> RunDir:
    """A run of the tiny config whose iteration 0 has quantize and explore complete (small stand-in artifacts)."""
    run = RunDir(tmp_path / "run")
    prepare_run(run, load_config(TINY, [env[1]]))
    for stage, files in (("quantize", {"report.json": b"{}"}),
                         ("explore", {"pool.zarr/zarr.json": b"{}", "pool.zarr/image/c/0/0": b"\x01" * 64})):
        with run.stage_output(0, stage) as out:
            for rel, data in files.items():
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                (out / rel).write_bytes(data)
        run.commit(0, stage, {"seconds": 0.0}, inputs={})
    run.eval_dir(0).mkdir(parents=True)
    return run


def train(capsys, run: RunDir, env: list[str]) -> tuple[int, str, str]:
    return run_main(capsys, "train", str(TINY), "--run-dir", str(run.root), *env)


# ---- the faults ---------------------------------------------------------------------------------------------------
def file_to_folder(path: Path) -> None:
    """A folder (holding a file of the user's) where solrl keeps a file."""
    if path.exists():
        path.unlink()
    path.mkdir()
    (path / "mine.txt").write_text("keep me")


def folder_to_file(path: Path) -> None:
    """A file where solrl keeps a folder (what the folder held is gone: the user's doing)."""
    shutil.rmtree(path)
    path.write_text("keep me")


def garbled_journal(path: Path, text: str) -> None:
    """A commit journal (manifests/<stage>.pending.json) that is not what solrl writes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def symlink_loop(path: Path) -> None:
    """A file replaced by a symbolic link to itself."""
    path.unlink()
    path.symlink_to(path.name)


def own_config(run: RunDir) -> None:
    """The user's own config in the run directory, in place of the frozen one."""
    run.config_path.write_text(f"extends: {TINY}\niterations: 3\n")


# ---- the cases ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, fault, needle", [
    (CURVE_FILE, file_to_folder, "is a directory, where solrl keeps a file"),
    (".lock", file_to_folder, "where solrl keeps the run's lock file"),
    ("run.json", file_to_folder, "is a directory"),
    ("iter_0000/manifests", folder_to_file, "is a file, where solrl keeps a directory"),
    ("iter_0000/manifests/explore.json", file_to_folder, "is a directory, where solrl keeps a file"),
    ("iter_0000/explore", folder_to_file, "is a file, where solrl keeps a directory"),
    ("eval/step_0000", folder_to_file, "is a file"),
    ("iter_0000/best_worst.png", file_to_folder, "is a directory"),
])
def test_a_name_of_the_layout_held_by_the_other_kind(run, env, capsys, name, fault, needle):
    path = run.root / name
    if name in (CURVE_FILE, ".lock", "iter_0000/best_worst.png"):
        path.write_bytes(b"")  # made by solrl in a run that got that far
    fault(path)
    before = snapshot(run.root)
    line = assert_one_line(*train(capsys, run, env), name, needle, "move it out of the run directory")
    assert str(run.root) in line
    assert_nothing_lost(run.root, before)


def test_a_link_loop_in_the_layout(run, env, capsys):
    symlink_loop(run.manifest_path(0, "quantize"))
    before = snapshot(run.root)
    assert_one_line(*train(capsys, run, env), "iter_0000/manifests/quantize.json", "a symbolic link that loops")
    assert_nothing_lost(run.root, before)


@pytest.mark.parametrize("text, what", [
    ('{"phase": "ready", "summ', "not valid JSON"),
    ("[1, 2, 3]", "a JSON list, not an object"),
    ('{"phase": "halfway"}', "unknown commit phase 'halfway'"),
    ('{"phase": "aside"}', "a commit without summary, id, inputs"),
    ("\xff\xfe", "not valid JSON"),
])
def test_a_garbled_commit_journal(run, env, capsys, text, what):
    journal = run.pending_path(0, "score_explore")
    garbled_journal(journal, text)
    before = snapshot(run.root)
    remedy = f"delete it and run: solrl stage score_explore --run-dir {run.root} --iteration 0 --force"
    assert_one_line(*train(capsys, run, env), str(journal), what, remedy)
    assert_nothing_lost(run.root, before)
    with pytest.raises(DamagedArtifactError, match="is damaged"):  # wherever it is read
        run.recover()
    journal.unlink()  # the remedy's first half: the run holds the stages it had complete
    assert run.recover() == [] and run.is_complete(0, "explore") and not run.is_complete(0, "score_explore")


def test_a_garbled_evaluation_journal(run, env, capsys):
    journal = run.eval_pending_path(0)
    garbled_journal(journal, '{"phase": ')
    before = snapshot(run.root)
    assert_one_line(*train(capsys, run, env), str(journal), f"delete it and run: solrl eval --run-dir {run.root} "
                    "--step 0")
    assert_nothing_lost(run.root, before)


def test_a_users_own_config_in_the_run_directory(run, env, capsys, tmp_path):
    own_config(run)
    before = snapshot(run.root)
    for args in (("train", str(TINY), "--run-dir", str(run.root), *env),
                 ("train", str(run.config_path), "--run-dir", str(run.root), *env),
                 ("stage", "score_explore", "--run-dir", str(run.root), "--iteration", "0"),
                 ("status", "--run-dir", str(run.root))):
        line = assert_one_line(*run_main(capsys, *args), str(run.config_path), "not a config solrl froze",
                               f"--run-dir {run.root}")
        assert "unknown key" not in line
        assert_nothing_lost(run.root, before)  # the user's file is not overwritten


def test_run_dir_a_link_that_leads_nowhere(env, capsys, tmp_path):
    link = tmp_path / "runs"
    link.symlink_to(tmp_path / "gone")
    for run_dir in (link, link / "demo"):
        assert_one_line(*run_main(capsys, "train", str(TINY), "--run-dir", str(run_dir), *env), str(run_dir),
                        "a symbolic link that leads nowhere", str(tmp_path / "gone"), "--run-dir")
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_run_json_without_its_run_id(run, capsys):
    run.run_json.write_text(json.dumps({"tracking_uri": "sqlite:///x.db"}))
    with pytest.raises(DamagedArtifactError, match="run.json is damaged .no mlflow_run_id.; it only records"):
        run.run_info()
