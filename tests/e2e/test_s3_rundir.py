"""Run directories on a real S3-compatible server (moto in server mode on 127.0.0.1): the storage helpers, the lease,
a missing bucket, and one iteration of the tiny config trained through the CLI into s3:// (the same helpers on
memory://: tests/unit/run/test_fsspec_rundir.py)."""

from __future__ import annotations

import json
import logging
import uuid

import pytest
import torch

from cli_processes import SMALLER_RUN, SMALLER_SETS, solrl, tracking_set
from fsspec_storage_checks import check_json_and_safetensors_round_trip, check_stage_output_manifest_and_pool
from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.errors import RunDirLockedError
from solrl_core.run.pool import read_table
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run.storage import Lease, as_path, load_tensors, read_json

BUCKET = "solrl-test"


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 server on 127.0.0.1 (a real HTTP server, not an in-process mock), with a bucket; stopped after."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log lines
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        import boto3
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()  # no client made for another endpoint
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield {"env": env, "client": client}
        s3fs.S3FileSystem.clear_instance_cache()
    server.stop()


def _keys(client, prefix: str) -> set[str]:
    keys, token = set(), None
    while True:
        extra = {"ContinuationToken": token} if token else {}
        page = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix, **extra)
        keys |= {obj["Key"] for obj in page.get("Contents", [])}
        if not page.get("IsTruncated"):
            return keys
        token = page["NextContinuationToken"]


def test_json_and_safetensors_round_trip(s3_server):
    check_json_and_safetensors_round_trip(as_path(f"s3://{BUCKET}/helpers-{uuid.uuid4().hex[:8]}"))


def test_stage_output_manifest_and_pool(s3_server):
    check_stage_output_manifest_and_pool(RunDir(f"s3://{BUCKET}/units-{uuid.uuid4().hex[:8]}"))


def test_lease_refuses_a_second_holder_and_is_released(s3_server):
    run = RunDir(f"s3://{BUCKET}/lease-{uuid.uuid4().hex[:8]}")
    lock = run.root / ".lock"
    with run.hold():
        record = json.loads(lock.read_text())
        assert record["token"] and record["owner"]
        with pytest.raises(RunDirLockedError, match="is held by"):
            with RunDir(str(run.root)).hold():
                pass
        # the refusal comes from S3 itself: an exclusive create (If-None-Match) of an existing object fails
        with pytest.raises(FileExistsError):
            with lock.fs.open(lock.path, "xb") as fh:
                fh.write(b"{}")
    assert not lock.exists()
    with RunDir(str(run.root)).hold():  # free again
        assert lock.exists()


def test_abandoned_lease_is_taken_over(s3_server):
    run = RunDir(f"s3://{BUCKET}/stale-{uuid.uuid4().hex[:8]}")
    lock = run.root / ".lock"
    lock.write_text(json.dumps({"owner": "a killed run", "token": "old", "heartbeat": 0.0, "seconds": 60}))
    with run.hold():
        assert json.loads(lock.read_text())["token"] != "old"
    fresh = Lease(lock)
    fresh.acquire("x")
    try:
        with pytest.raises(RunDirLockedError, match="held by"):
            Lease(lock).acquire("x")
    finally:
        fresh.release()


def test_one_iteration_into_s3(s3_server, session_env):
    """The real CLI (as the run_cli fixture runs it, with the S3 variables added to its environment)."""
    env = {**session_env, **s3_server["env"]}
    url = f"s3://{BUCKET}/run-{uuid.uuid4().hex[:8]}"
    prefix = url.split("/", 3)[3]
    proc = solrl(env, "train", str(TINY), *SMALLER_RUN, "--iterations", "1", "--run-dir", url, "--no-progress",
                 *tracking_set(session_env))
    assert f"run directory : {url}" in proc.stdout
    assert "Unclosed" not in proc.stderr  # no HTTP session left open at exit

    keys = _keys(s3_server["client"], prefix + "/")
    artifacts = {
        "quantize": ["report.json"],
        "explore": ["pool.zarr/zarr.json", "pool.zarr/image/zarr.json"],
        "score_explore": ["rewards.zarr/zarr.json"],
        "select": ["selection.zarr/zarr.json"],
        "regenerate": ["samples.zarr/zarr.json"],
        "score_final": ["rewards.zarr/zarr.json"],
        "update": [f"checkpoint/{name}" for name in
                   ("adapters.safetensors", "ema.safetensors", "optimizer.safetensors", "state.json")],
    }
    for stage in STAGES:
        assert f"{prefix}/iter_0000/manifests/{stage}.json" in keys, stage
        for name in artifacts[stage]:
            assert f"{prefix}/iter_0000/{stage}/{name}" in keys, (stage, name)
    assert not [k for k in keys if ".partial/" in k or ".tmp" in k]
    assert {f"{prefix}/config.yaml", f"{prefix}/run.json", f"{prefix}/init/adapters.safetensors"} <= keys
    assert f"{prefix}/.lock" not in keys  # the lease is released at the end
    assert any(k.startswith(f"{prefix}/text_cache/") for k in keys)

    cfg = load_config(TINY, SMALLER_SETS)
    run = RunDir(url)
    pool, attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr", ["prompt_index", "seed", "image"])
    n = cfg.prompts.per_iteration * cfg.explore.seeds_per_prompt
    assert attrs["committed"] == n and len(pool["seed"]) == n and len(set(pool["seed"].tolist())) == n
    assert pool["image"].shape[0] == n and pool["image"].std() > 0
    samples, _ = read_table(run.stage_dir(0, "regenerate") / "samples.zarr", ["latent"])
    assert samples["latent"].shape[0] == cfg.prompts.per_iteration * cfg.select.k

    checkpoint = run.checkpoint_dir(0)
    state = read_json(checkpoint / "state.json")
    assert state["iteration"] == 0 and state["step"] == run.manifest(0, "update")["summary"]["step"]
    adapters = load_tensors(checkpoint / "adapters.safetensors")
    initial = load_tensors(run.init_dir / "adapters.safetensors")
    assert adapters.keys() == initial.keys() and all(torch.isfinite(v).all() for v in adapters.values())
    assert any(not torch.equal(adapters[k], initial[k]) for k in adapters if k.startswith("default."))

    status = json.loads(solrl(env, "status", "--run-dir", url, "--json").stdout)
    assert status["run_dir"] == url
    assert [set(it["stages"].values()) for it in status["iterations"]][0] == {"complete"}


def test_missing_bucket_is_a_one_line_error_and_is_not_created(s3_server):
    from solrl_core.errors import SolrlError

    with pytest.raises(SolrlError, match="cannot write to run directory s3://no-such-bucket/run"):
        with RunDir("s3://no-such-bucket/run").hold():
            pass
    buckets = {b["Name"] for b in s3_server["client"].list_buckets()["Buckets"]}
    assert "no-such-bucket" not in buckets
