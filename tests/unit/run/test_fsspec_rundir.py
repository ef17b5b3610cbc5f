"""Run directories at fsspec URLs, on memory://: local paths stay plain paths, and the storage helpers and a stage's
output work there (on a real S3-compatible server: tests/e2e/test_s3_rundir.py)."""

from __future__ import annotations

import uuid

from fsspec_storage_checks import check_json_and_safetensors_round_trip, check_stage_output_manifest_and_pool
from solrl_core.run.rundir import RunDir
from solrl_core.run.storage import as_path, is_remote


def test_local_paths_stay_plain_paths(tmp_path):
    from pathlib import Path

    assert type(as_path(str(tmp_path))) is type(tmp_path)
    assert as_path(f"file://{tmp_path}") == tmp_path
    assert not is_remote(RunDir(tmp_path).root)
    assert is_remote(RunDir("memory://bucket/run").root)
    assert isinstance(RunDir("runs/x").root, Path)


def test_json_and_safetensors_round_trip():
    check_json_and_safetensors_round_trip(as_path(f"memory://helpers-{uuid.uuid4().hex[:8]}"))


def test_stage_output_manifest_and_pool():
    check_stage_output_manifest_and_pool(RunDir(f"memory://solrl-test/units-{uuid.uuid4().hex[:8]}"))
