"""What a run directory's storage must do on any fsspec file system, checked on memory:// in tests/unit/run/
test_fsspec_rundir.py and on a real S3-compatible server in tests/e2e/test_s3_rundir.py."""

from __future__ import annotations

import numpy as np
import torch

from solrl_core.run.pool import read_table, write_table
from solrl_core.run.rundir import RunDir
from solrl_core.run.storage import load_tensors, load_tensors_with_metadata, read_json, save_tensors, write_json_atomic


def check_json_and_safetensors_round_trip(root) -> None:
    """JSON written atomically (replaced whole, no temporary object left) and safetensors with metadata under the
    folder `root` (a UPath) read back equal."""
    target = root / "a" / "b.json"
    write_json_atomic(target, {"x": [1, 2], "y": "z"})
    write_json_atomic(target, {"x": [3]})  # replaced whole
    assert read_json(str(target)) == {"x": [3]}
    assert [p.name for p in (root / "a").iterdir()] == ["b.json"]  # no temporary objects left behind

    tensors = {"w": torch.randn(3, 5), "b": torch.arange(4, dtype=torch.int64)}
    save_tensors(tensors, root / "t.safetensors", metadata={"prompt": "two red circles"})
    back = load_tensors(root / "t.safetensors")
    back_meta, metadata = load_tensors_with_metadata(root / "t.safetensors")
    for key, value in tensors.items():
        torch.testing.assert_close(back[key], value, rtol=0, atol=0)
        torch.testing.assert_close(back_meta[key], value, rtol=0, atol=0)
    assert metadata == {"prompt": "two red circles"}


def check_stage_output_manifest_and_pool(run: RunDir) -> None:
    """A stage's output written, committed, read back and invalidated in the run directory `run` (at a URL)."""
    with run.stage_output(0, "explore") as out:
        write_table(out / "pool.zarr", {"seed": np.arange(6), "image": np.zeros((6, 2, 2, 3), np.uint8)}, {"n": 6})
        save_tensors({"w": torch.ones(2)}, out / "w.safetensors")
        assert run.stage_status(0, "explore") == "partial"
    assert run.stage_status(0, "explore") == "partial"  # artifact finished, but not committed yet
    run.commit(0, "explore", {"rows": 6}, {})
    assert not run.partial_dir(0, "explore").exists()
    assert run.stage_status(0, "explore") == "complete"
    cols, attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr")
    np.testing.assert_array_equal(cols["seed"], np.arange(6))
    assert attrs == {"n": 6} and run.iterations_present() == [0]
    assert load_tensors(run.stage_dir(0, "explore") / "w.safetensors")["w"].tolist() == [1.0, 1.0]
    run.invalidate(0, "explore")  # the manifest goes first, then the objects
    assert run.stage_status(0, "explore") == "pending"
    assert not run.root.fs.find(run.iteration_dir(0).path)  # nothing left of the stage
