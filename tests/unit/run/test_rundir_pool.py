"""Run directory (atomic stage output, manifests, the lock) and the resumable zarr pool (across processes:
tests/e2e/test_rundir_pool_processes.py)."""


import numpy as np
import pytest

from solrl_core.errors import RunDirLockedError
from solrl_core.run.pool import CandidateWriter, read_rows, read_table, write_table
from solrl_core.run.rundir import RunDir


def test_stage_output_is_committed_and_manifest_marks_completion(tmp_path):
    run = RunDir(tmp_path)
    assert run.stage_status(0, "explore") == "pending"
    with run.stage_output(0, "explore") as out:
        (out / "a.txt").write_text("x")
        assert run.stage_status(0, "explore") == "partial"
    assert not run.stage_dir(0, "explore").exists()  # the artifact waits in .partial for its commit
    assert not run.is_complete(0, "explore")
    manifest = run.commit(0, "explore", {"n": 1}, {})
    assert (run.stage_dir(0, "explore") / "a.txt").read_text() == "x"
    assert not run.partial_dir(0, "explore").exists() and not run.pending_path(0, "explore").exists()
    assert run.is_complete(0, "explore") and run.manifest(0, "explore") == manifest
    assert manifest["summary"] == {"n": 1} and manifest["inputs"] == {} and len(manifest["id"]) == 32
    run.invalidate(0, "explore")
    assert run.stage_status(0, "explore") == "pending"


def test_failed_stage_leaves_no_artifact(tmp_path):
    run = RunDir(tmp_path)
    with pytest.raises(RuntimeError):
        with run.stage_output(0, "score_explore"):
            raise RuntimeError("boom")
    assert not run.stage_dir(0, "score_explore").exists()


def test_lock_refuses_in_same_process(tmp_path):
    run = RunDir(tmp_path)
    with run.hold():
        with pytest.raises(RunDirLockedError):
            with RunDir(tmp_path).hold():
                pass


def _rows(start, n):
    return {
        "prompt_index": np.arange(start, start + n) // 4,
        "seed": np.arange(start, start + n) * 10,
        "image": np.full((n, 4, 4, 3), start, np.uint8) + np.arange(n)[:, None, None, None].astype(np.uint8),
    }


def test_pool_resumes_at_committed_row_and_overwrites_torn_batch(tmp_path):
    path = tmp_path / "pool.zarr"
    w = CandidateWriter.open(path, 8, (4, 4, 3), None, {"prompts": ["a", "b"]})
    w.write_batch(0, _rows(0, 2))
    w.write_batch(2, _rows(2, 2))
    # a torn batch: rows written but the commit marker not advanced
    w.group["seed"][4:6] = [999, 999]
    w2 = CandidateWriter.open(path, 8, (4, 4, 3), None, {"prompts": ["a", "b"]})
    assert w2.committed == 4
    with pytest.raises(ValueError):
        w2.write_batch(6, _rows(6, 2))
    w2.write_batch(4, _rows(4, 2))
    w2.write_batch(6, _rows(6, 2))
    cols, attrs = read_table(path, ["seed", "prompt_index"])
    np.testing.assert_array_equal(cols["seed"], np.arange(8) * 10)
    assert attrs["committed"] == 8 and attrs["prompts"] == ["a", "b"]
    np.testing.assert_array_equal(read_rows(path, "image", np.array([5, 1])), np.stack([_rows(4, 2)["image"][1],
                                                                                        _rows(0, 2)["image"][1]]))


def test_pool_recreated_when_shapes_change(tmp_path):
    path = tmp_path / "pool.zarr"
    CandidateWriter.open(path, 4, (4, 4, 3), None, {}).write_batch(0, _rows(0, 2))
    assert CandidateWriter.open(path, 6, (4, 4, 3), None, {}).committed == 0


def test_table_round_trip(tmp_path):
    write_table(tmp_path / "t.zarr", {"r": np.array([0.5, 0.25], np.float32), "sel": np.array([True, False])},
                {"mode": "best_worst"})
    cols, attrs = read_table(tmp_path / "t.zarr")
    assert attrs == {"mode": "best_worst"}
    np.testing.assert_array_equal(cols["r"], [0.5, 0.25])
    np.testing.assert_array_equal(cols["sel"], [True, False])


def test_pool_torn_at_creation_is_started_again(tmp_path):
    path = tmp_path / "pool.zarr"
    path.mkdir()  # killed before the group's metadata was written
    w = CandidateWriter.open(path, 4, (4, 4, 3), None, {})
    assert w.committed == 0
    w.write_batch(0, _rows(0, 4))
    assert read_table(path, ["seed"])[1]["committed"] == 4
