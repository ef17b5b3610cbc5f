"""Work split over devices: the shard plan, per-batch completion markers, and a run on two CPU devices (a local Dask
cluster of two pinned worker processes) that gives the same pools, rewards, checkpoint and evaluation as one device,
bit for bit."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time

import numpy as np
import pytest

from conftest import TINY
from solrl_core.errors import SolrlError
from solrl_core.evaluate import eval_dir
from solrl_core.run.pool import CandidateWriter, read_table
from solrl_core.stages.shards import plan_shards


@pytest.mark.parametrize("n_rows,batch_size,workers", [(16, 2, 2), (17, 2, 3), (5, 4, 8), (96, 32, 4), (1, 1, 1)])
def test_shard_plan_covers_every_batch_once_in_contiguous_balanced_ranges(n_rows, batch_size, workers):
    shards = plan_shards(n_rows, batch_size, workers)
    n_batches = -(-n_rows // batch_size)
    assert len(shards) == min(workers, n_batches)
    assert [s.index for s in shards] == list(range(len(shards)))
    assert shards[0].first_batch == 0 and shards[-1].stop_batch == n_batches
    for a, b in zip(shards, shards[1:]):
        assert a.stop_batch == b.first_batch  # contiguous, no overlap
    sizes = [len(s.batches) for s in shards]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_shard_plan_refuses_no_workers():
    with pytest.raises(ValueError):
        plan_shards(8, 2, 0)


def _rows(start, n):
    rows = np.arange(start, start + n)
    return {"prompt_index": (rows // 4).astype(np.int32), "seed": rows * 10,
            "image": np.broadcast_to(rows[:, None, None, None], (n, 2, 2, 3)).astype(np.uint8)}


def _open(path, create=True):
    return CandidateWriter.open(path, 10, (2, 2, 3), None, {"prompts": ["a"]}, batch_size=4, create=create)


def test_batch_markers_let_shards_write_out_of_order_and_resume(tmp_path):
    path = tmp_path / "pool.zarr"
    with pytest.raises(SolrlError, match="missing"):
        _open(path, create=False)  # a shard never creates the pool
    _open(path)  # prepared: 10 rows, batches [0,4) [4,8) [8,10)
    late, early = _open(path, create=False), _open(path, create=False)  # two shard writers on one pool
    late.write_batch(8, _rows(8, 2), in_order=False)  # the short last batch first
    with pytest.raises(ValueError, match="whole batches"):
        early.write_batch(2, _rows(2, 4), in_order=False)
    # a torn batch: rows 4-7 written, its marker not set (killed in between)
    early.group["seed"][4:8] = [-5, -5, -5, -5]
    early.write_batch(0, _rows(0, 4), in_order=False)
    assert read_table(path, ["seed"])[1]["committed"] == 0  # shards leave the attribute to sync_committed
    resumed = _open(path, create=False)  # the early shard again, after a crash: only the torn batch is left
    assert resumed.pending(range(0, 2)) == [1] and resumed.pending() == [1]
    assert resumed.committed == 4
    resumed.write_batch(4, _rows(4, 4), in_order=False)
    assert _open(path).sync_committed() == 10
    cols, attrs = read_table(path, ["seed", "prompt_index", "image", "batch_done"])
    assert attrs["committed"] == 10
    np.testing.assert_array_equal(cols["seed"], np.arange(10) * 10)
    np.testing.assert_array_equal(cols["image"][:, 0, 0, 0], np.arange(10))
    np.testing.assert_array_equal(cols["batch_done"], [1, 1, 1])


def test_single_writer_skips_batches_done_by_shards(tmp_path):
    """workers 2 -> 1 between attempts: the single writer resumes at the first batch not done and keeps the rest."""
    path = tmp_path / "pool.zarr"
    _open(path).write_batch(4, _rows(4, 4), in_order=False)
    single = _open(path)  # in order from here on
    assert single.committed == 0 and single.pending() == [0, 2]
    with pytest.raises(ValueError, match="committed"):
        single.write_batch(8, _rows(8, 2))
    single.write_batch(0, _rows(0, 4))
    assert single.committed == 8 and read_table(path, ["seed"])[1]["committed"] == 8
    single.write_batch(8, _rows(8, 2))
    assert read_table(path, ["seed"])[1]["committed"] == 10
    np.testing.assert_array_equal(read_table(path, ["seed"])[0]["seed"], np.arange(10) * 10)


def test_pool_made_for_another_batch_size_is_started_again(tmp_path):
    path = tmp_path / "pool.zarr"
    _open(path).write_batch(0, _rows(0, 4))
    other = CandidateWriter.open(path, 10, (2, 2, 3), None, {}, batch_size=2)
    assert other.committed == 0 and other.n_batches == 5
    with pytest.raises(SolrlError):
        _open(path, create=False)


STAGES = ("explore", "score_explore", "select", "regenerate", "score_final", "update")
SPLIT = ("explore", "score_explore", "regenerate", "score_final")  # the stages of STAGES whose work is split
COMPARED = {
    ("explore", "pool.zarr"): ["image", "latent", "seed", "prompt_index"],
    ("regenerate", "samples.zarr"): ["image", "latent", "seed", "prompt_index", "candidate_index"],
    ("score_explore", "rewards.zarr"): None,
    ("score_final", "rewards.zarr"): None,
    ("select", "selection.zarr"): None,
}
# rewards in batches of 2 rows, so that the score stages and the evaluation split too; a small evaluation
SETTINGS = ["reward_models.embedded.batch_size=2", "eval.num_prompts=2", "eval.seeds_per_prompt=2", "eval.steps=2",
            "eval.batch_size=1"]


def _config(*overrides):
    from solrl_core.config.loading import load_config

    return load_config(TINY, [*SETTINGS, *overrides])


@pytest.fixture(scope="module")
def reference(tmp_path_factory, one_torch_thread):
    """A tiny run whose iteration 0 ran quantize..update, then the evaluation after it, on one device in this
    process; and the seconds explore..update took."""
    from solrl_core.evaluate import run_eval
    from solrl_core.run.rundir import RunDir
    from solrl_core.runs import prepare_run
    from solrl_core.stages.runner import run_stage

    one = RunDir(tmp_path_factory.mktemp("shards") / "one")
    cfg = prepare_run(one, _config())
    run_stage(one, cfg, 0, "quantize", progress=False)
    start = time.perf_counter()
    for stage in STAGES:
        run_stage(one, cfg, 0, stage, progress=False)
    seconds = time.perf_counter() - start
    run_eval(one, cfg, 1)
    return one, seconds


def _copy_quantized(reference, path, *overrides):
    """A copy of the reference run with only its quantize stage done, run with `overrides` (placement settings)."""
    from solrl_core.run.rundir import RunDir
    from solrl_core.runs import prepare_run

    shutil.copytree(reference.root, path)
    run = RunDir(path)
    for stage in STAGES:
        run.invalidate(0, stage)
    shutil.rmtree(run.root / "eval")
    return run, prepare_run(run, _config(*overrides))


def _assert_same_results(one, two, stages=STAGES):
    for (stage, name), columns in COMPARED.items():
        if stage not in stages:
            continue
        a, attrs_a = read_table(one.stage_dir(0, stage) / name, columns)
        b, attrs_b = read_table(two.stage_dir(0, stage) / name, columns)
        assert a.keys() == b.keys() and a
        for key in a:
            assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes(), f"{stage}/{name}: {key}"
        assert attrs_a == attrs_b, f"{stage}/{name} attributes"
    if "update" in stages:
        for name in ("adapters.safetensors", "ema.safetensors", "optimizer.safetensors"):
            a, b = (run.checkpoint_dir(0) / name for run in (one, two))
            assert a.read_bytes() == b.read_bytes(), f"checkpoint {name}"


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
    from flows.evaluation import evaluation_flow
    from flows.stage import stage_flow
    from tasks.shards import dask_shards

    one, one_seconds = reference
    two, _ = _copy_quantized(one, tmp_path / "two", "orchestration.devices=[cpu, cpu]")
    start = time.perf_counter()
    with _prefect(session_env), dask_shards():  # one local cluster serves every stage (they start one each alone)
        manifests = {stage: stage_flow(str(two.root), stage, 0, progress=False) for stage in STAGES}
        print(f"explore..update: 1 device {one_seconds:.1f} s, 2 CPU devices {time.perf_counter() - start:.1f} s")
        evaluation = evaluation_flow(str(two.root), 1, progress=False)

    rows = {"explore": 16, "score_explore": 16, "regenerate": 8, "score_final": 8}
    for stage in SPLIT:
        _assert_two_cpu_processes(manifests[stage]["summary"]["shards"], rows[stage])
        (alone,) = one.manifest(0, stage)["summary"]["shards"]
        assert alone["pid"] == os.getpid() and alone["device"] == "cpu" and alone["rows"] == [0, rows[stage]]
    (rank,) = manifests["update"]["summary"]["shards"]  # one update process (train.processes 1): worker 0's
    assert rank["device"] == "cpu" and rank["pid"] in {s["pid"] for s in manifests["explore"]["summary"]["shards"]}
    _assert_two_cpu_processes(evaluation["shards"], 4)
    _assert_two_cpu_processes(evaluation["score_shards"], 4)
    _assert_same_results(one, two)
    assert not (two.stage_dir(0, "explore") / "scores.zarr").exists()  # split: scored by the score stage
    assert (one.stage_dir(0, "explore") / "scores.zarr").exists()  # one device: scored while sampling
    a, b = (json.loads((eval_dir(run, 1) / "metrics.json").read_text()) for run in (one, two))
    assert a["metrics"] == b["metrics"] and a["samples"] == b["samples"] == 4
    images = [read_table(eval_dir(run, 1) / "pool.zarr", ["image"])[0]["image"] for run in (one, two)]
    assert images[0].tobytes() == images[1].tobytes()


def test_sharded_stage_left_unfinished_resumes_to_the_same_pool(tmp_path, reference):
    """A runner whose second shard stopped after one batch: the stage refuses to complete; run again, the missing
    batches (only those) are sampled and the results equal the one-device run."""
    from solrl_core.stages.runner import run_stage
    from solrl_core.stages.shards import InProcess, Shard, prepare, run_shard, use_shard_runner

    one, _ = reference
    two, cfg = _copy_quantized(one, tmp_path / "two", "orchestration.devices=[cpu, cpu]")
    ran = []

    class Interrupted(InProcess):
        def __call__(self, ctx, ref, shards):
            prepare(ctx, ref, "cpu")
            first, second = shards
            ran.append(run_shard(ctx, ref, first, "cpu", "cpu"))
            ran.append(run_shard(ctx, ref, Shard(second.index, second.first_batch, second.first_batch + 1), "cpu",
                                 "cpu"))
            return ran

    with use_shard_runner(Interrupted()), pytest.raises(SolrlError, match="3 of 8 batches are not done"):
        run_stage(two, cfg, 0, "explore", progress=False)
    assert not two.is_complete(0, "explore")
    pool = two.partial_dir(0, "explore") / "pool.zarr"
    assert read_table(pool, ["batch_done"])[0]["batch_done"].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]

    class Resumed(InProcess):
        def __call__(self, ctx, ref, shards):
            reports = super().__call__(ctx, ref, shards)  # prepare (keeps the explore pool), then every shard
            ran.extend(reports)
            return reports

    with use_shard_runner(Resumed()):
        for stage in STAGES:
            run_stage(two, cfg, 0, stage, progress=False)
    sampled = [r["sampled"] for r in ran if "sampled" in r]
    # explore: shard 0 sampled its 4 batches, shard 1 one; on resume only shard 1's 3 missing ones; regenerate 1 + 1
    assert sampled == [4, 1, 0, 3, 1, 1] and not any(r["left"] for r in ran if "left" in r)
    assert [r["scored"] for r in ran if "scored" in r] == [8, 8, 4, 4]  # both score stages, in two shards
    _assert_same_results(one, two)


@pytest.fixture
def dask_cluster(session_env, tmp_path):
    """A Dask scheduler and two workers started separately on 127.0.0.1, as a team starts them (one worker per
    device, each with the `device` resource; here CPU workers); yields the scheduler's address."""
    import subprocess
    import sys

    from distributed import Client

    from conftest import ROOT

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
    from flows.stage import stage_flow

    one, _ = reference
    two, _ = _copy_quantized(one, tmp_path / "two", f"orchestration.dask_address={dask_cluster}")
    with _prefect(session_env):
        manifest = stage_flow(str(two.root), "explore", 0, progress=False)
    shards = manifest["summary"]["shards"]
    _assert_two_cpu_processes(shards, 16)
    _assert_same_results(one, two, stages=("explore",))


def test_device_workers_share_the_hosts_memory_instead_of_dasks_per_core_default(monkeypatch):
    """Dask's default gives a worker the host's memory divided by its cores, and kills it at 95 % of that: a worker
    loading a FLUX.1-sized model (~31 GB of host memory for a while) died on a 224-thread node. Each device worker
    gets an equal share of the host's memory instead."""
    from distributed.system import MEMORY_LIMIT

    from tasks.shards import worker_specs

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    specs = worker_specs(["cuda:0", "cuda:1", "cuda:2", "cuda:3"], [])
    assert {spec["options"]["memory_limit"] for spec in specs.values()} == {MEMORY_LIMIT // 4}
    assert [spec["options"]["env"]["CUDA_VISIBLE_DEVICES"] for spec in specs.values()] == ["0", "1", "2", "3"]
