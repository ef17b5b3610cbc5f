"""Work split over devices in processes: a run on two CPU devices (a local Dask cluster of two pinned worker
processes) and through a Dask cluster started separately gives the same pools, rewards, checkpoint and evaluation as
one device, bit for bit (the plan and the markers in process: tests/unit/stages/test_explore_shards.py)."""

from __future__ import annotations

import contextlib
import json
import os
import time

import pytest

from sharded_runs import STAGES, UPDATE_THREADS, assert_same_results, copy_quantized
from sharded_runs import reference  # noqa: F401 - a fixture: the one-device run
from solrl_core.evaluate import eval_dir
from solrl_core.run.pool import read_table
from solrl_core.torch_threads import intra_op_threads


SPLIT = ("explore", "score_explore", "regenerate", "score_final")  # the stages of STAGES whose work is split


def _assert_two_cpu_processes(shards, rows):
    assert [s["shard"] for s in shards] == [0, 1] and [s["device"] for s in shards] == ["cpu", "cpu"]
    assert len({s["pid"] for s in shards}) == 2 and os.getpid() not in {s["pid"] for s in shards}
    assert shards[0]["rows"][0] == 0 and shards[0]["rows"][1] == shards[1]["rows"][0] and shards[1]["rows"][1] == rows
    assert all(s["seconds"] > 0 for s in shards)


@contextlib.contextmanager
def _prefect(session_env):
    from prefect.settings import PREFECT_API_URL, PREFECT_LOGGING_TO_API_ENABLED, temporary_settings

    # logs stay local: the server stops with the session, before this process would flush them
    with temporary_settings(updates={PREFECT_API_URL: session_env["PREFECT_API_URL"],
                                     PREFECT_LOGGING_TO_API_ENABLED: False}):
        yield


def test_two_cpu_devices_equal_one_device(session_env, tmp_path, reference):
    """devices [cpu, cpu]: explore, both score stages, regenerate and the evaluation run as two pinned Dask worker
    processes (recorded per shard in the manifests), and every artifact, the checkpoint and the evaluation equal
    the one-device run's, bit for bit."""
    from solrl.flows.evaluation import evaluation_flow
    from solrl.flows.stage import stage_flow
    from solrl.tasks.dask_shards import dask_shards

    one, one_seconds = reference
    two, _ = copy_quantized(one, tmp_path / "two", "orchestration.devices=[cpu, cpu]")
    start = time.perf_counter()
    with _prefect(session_env), dask_shards():  # one local cluster serves every stage (they start one each alone)
        manifests = {}
        for stage in STAGES:
            with intra_op_threads(UPDATE_THREADS if stage == "update" else None):
                manifests[stage] = stage_flow(str(two.root), stage, 0, progress=False)
        print(f"explore..update: 1 device {one_seconds:.1f} s, 2 CPU devices {time.perf_counter() - start:.1f} s")
        evaluation = evaluation_flow(str(two.root), 1, progress=False)

    rows = {"explore": 16, "score_explore": 16, "regenerate": 8, "score_final": 8}
    for stage in SPLIT:
        _assert_two_cpu_processes(manifests[stage]["summary"]["shards"], rows[stage])
        (alone,) = one.manifest(0, stage)["summary"]["shards"]
        assert alone["pid"] == os.getpid() and alone["device"] == "cpu" and alone["rows"] == [0, rows[stage]]
    (rank,) = manifests["update"]["summary"]["shards"]  # one update process (train.processes 1): worker 0's
    assert rank["device"] == "cpu" and rank["pid"] in {s["pid"] for s in manifests["explore"]["summary"]["shards"]}
    assert rank["threads"] == UPDATE_THREADS  # the orchestrating process's threads, as the one-device update had
    _assert_two_cpu_processes(evaluation["shards"], 4)
    _assert_two_cpu_processes(evaluation["score_shards"], 4)
    assert_same_results(one, two)
    assert not (two.stage_dir(0, "explore") / "scores.zarr").exists()  # split: scored by the score stage
    assert (one.stage_dir(0, "explore") / "scores.zarr").exists()  # one device: scored while sampling
    a, b = (json.loads((eval_dir(run, 1) / "metrics.json").read_text()) for run in (one, two))
    assert a["metrics"] == b["metrics"] and a["samples"] == b["samples"] == 4
    images = [read_table(eval_dir(run, 1) / "pool.zarr", ["image"])[0]["image"] for run in (one, two)]
    assert images[0].tobytes() == images[1].tobytes()


@pytest.fixture
def dask_cluster(session_env, tmp_path):
    """A Dask scheduler and two workers started separately on 127.0.0.1, as a team starts them (one worker per
    device, each with the `device` resource; here CPU workers); yields the scheduler's address."""
    import subprocess
    import sys

    from distributed import Client

    from repo_paths import ROOT

    env = {**session_env, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    file = tmp_path / "scheduler.json"
    common = ["--no-dashboard", "--host", "127.0.0.1"]
    logs = [open(tmp_path / f"{name}.log", "w") for name in ("scheduler", "worker0", "worker1")]
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--port", "0",
                               "--scheduler-file", str(file), *common], env=env, stdout=logs[0], stderr=logs[0],
                              start_new_session=True)]
    procs += [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(file),
                                "--nthreads", "1", "--resources", "device=1", "--name", f"cpu-{k}", *common],
                               env=env, stdout=logs[k + 1], stderr=logs[k + 1], start_new_session=True)
              for k in range(2)]
    try:
        deadline = time.time() + 120
        while not file.exists():
            assert time.time() < deadline and procs[0].poll() is None, f"no scheduler; see {tmp_path}"
            time.sleep(0.5)
        with Client(scheduler_file=str(file), timeout=60) as client:
            client.wait_for_workers(2, timeout=180)
            yield client.scheduler.address
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs:
            log.close()


def test_explore_through_a_running_dask_cluster_equals_one_device(session_env, tmp_path, reference, dask_cluster):
    from solrl.flows.stage import stage_flow

    one, _ = reference
    two, _ = copy_quantized(one, tmp_path / "two", f"orchestration.dask_address={dask_cluster}")
    with _prefect(session_env):
        manifest = stage_flow(str(two.root), "explore", 0, progress=False)
    shards = manifest["summary"]["shards"]
    _assert_two_cpu_processes(shards, 16)
    assert_same_results(one, two, stages=("explore",))
