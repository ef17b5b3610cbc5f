"""`solrl status` of a run a live process holds says "running (pid, host, since)" and calls its half-written stage in
progress, not interrupted; once the process lets go, the same stage is interrupted with its resume command."""

from __future__ import annotations

import os

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import prepare_run
from solrl_core.status import run_status, status_text


def test_a_held_run_is_running_and_its_half_written_stage_in_progress(tmp_path):
    run = RunDir(tmp_path / "run")
    with run.hold():
        prepare_run(run, load_config(TINY))
    run.partial_dir(0, "explore").mkdir(parents=True)

    with run.hold():  # this process runs it (another open of the lock file sees it held)
        data = run_status(run)
        assert data["running"].startswith(f"pid {os.getpid()} on host ")
        assert data["interrupted"] == [] and data["in_progress"] == [{"iteration": 0, "stage": "explore"}]
        text = status_text(data)
        assert f"running      : pid {os.getpid()}" in text and "explore of iteration 0 in progress" in text
        assert "interrupted" not in text and "--force" not in text

    data = run_status(run)  # let go: what it left half-written is interrupted
    assert data["running"] is None and data["in_progress"] == []
    assert data["interrupted"] == [{"iteration": 0, "stage": "explore"}]
    assert "solrl stage explore" in status_text(data) and "running      :" not in status_text(data)


def test_a_folder_holding_someone_elses_config_is_not_a_run_directory(tmp_path):
    """A config.yaml solrl did not freeze (no digest line) that is no solrl config: "not a run directory", not the
    first key it does not know; one that solrl froze and then was edited stays "damaged"."""
    import pytest

    from solrl_core.errors import SolrlError

    folder = tmp_path / "other-tool"
    folder.mkdir()
    (folder / "config.yaml").write_text("model:\n  name: resnet50\noptimizer: adam\n")
    with pytest.raises(SolrlError, match=rf"^{folder} is not a run directory of solrl: its config.yaml has no digest "
                                         r"line .*give the --run-dir of a solrl run$"):
        run_status(RunDir(folder))
    run = RunDir(tmp_path / "run")
    prepare_run(run, load_config(TINY))
    run.config_path.write_text(run.config_path.read_text().replace("iterations:", "iterations: 3\nxiterations:", 1))
    with pytest.raises(SolrlError, match="is damaged"):
        run_status(run)


def test_a_complete_stage_whose_file_was_deleted_or_cut_is_damaged(tmp_path):
    """`solrl status` checks each complete stage's files against its manifest (sizes, a stat each): a file deleted or
    truncated since is "DAMAGED" with the command that rebuilds it, and the iteration is no longer complete."""
    run = RunDir(tmp_path / "run")
    prepare_run(run, load_config(TINY))
    with run.hold():
        with run.stage_output(0, "select") as out:
            (out / "summary.json").write_text('{"version": 1}')
            (out / "data.txt").write_text("x" * 100)
        run.commit(0, "select", {"version": 1}, {})
    assert run_status(run)["damaged"] == []

    (run.stage_dir(0, "select") / "data.txt").write_text("x" * 10)
    data = run_status(run)
    assert [(d["iteration"], d["stage"]) for d in data["damaged"]] == [(0, "select")]
    assert data["iterations"][0]["stages"]["select"] == "damaged"
    text = status_text(data)
    assert "damaged      : iter_0000/select/data.txt is damaged" in text
    assert f"solrl stage select --run-dir {run.root} --iteration 0 --force" in text

    (run.stage_dir(0, "select") / "data.txt").unlink()
    assert "(missing)" in status_text(run_status(run))
