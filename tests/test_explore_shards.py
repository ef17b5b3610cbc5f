"""Multi-worker explore/regenerate: the shard plan, per-batch completion markers, and a sharded run on a local Dask
cluster of 2 processes that gives the same pool and rewards as one process, bit for bit."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from conftest import TINY
from solrl_core.errors import SolrlError
from solrl_core.pool import CandidateWriter, read_table
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


STAGES = ("explore", "score_explore", "select", "regenerate", "score_final")
COMPARED = {
    ("explore", "pool.zarr"): ["image", "latent", "seed", "prompt_index"],
    ("regenerate", "samples.zarr"): ["image", "latent", "seed", "prompt_index", "candidate_index"],
    ("score_explore", "rewards.zarr"): None,
    ("score_final", "rewards.zarr"): None,
    ("select", "selection.zarr"): None,
}


def _config(workers):
    from solrl_core.config import load_config

    return load_config(TINY, [f"orchestration.workers.{stage}={workers}" for stage in ("explore", "regenerate")])


@pytest.fixture(scope="module")
def reference(tmp_path_factory, one_torch_thread):
    """A tiny run whose iteration 0 ran quantize..score_final in one process (workers 1); and the seconds it took."""
    from solrl_core.rundir import RunDir
    from solrl_core.runs import prepare_run
    from solrl_core.stages.registry import run_stage

    one = RunDir(tmp_path_factory.mktemp("shards") / "one")
    cfg = prepare_run(one, _config(1))
    run_stage(one, cfg, 0, "quantize", progress=False)
    start = time.perf_counter()
    for stage in STAGES:
        run_stage(one, cfg, 0, stage, progress=False)
    return one, time.perf_counter() - start


def _copy_quantized(reference, path, workers):
    """A copy of the reference run with only its quantize stage done, run with `workers` (resumable setting)."""
    from solrl_core.rundir import RunDir
    from solrl_core.runs import prepare_run

    shutil.copytree(reference.root, path)
    run = RunDir(path)
    for stage in STAGES:
        run.invalidate(0, stage)
    return run, prepare_run(run, _config(workers))


def _assert_same_results(one, two):
    for (stage, name), columns in COMPARED.items():
        a, attrs_a = read_table(one.stage_dir(0, stage) / name, columns)
        b, attrs_b = read_table(two.stage_dir(0, stage) / name, columns)
        assert a.keys() == b.keys() and a
        for key in a:
            assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes(), f"{stage}/{name}: {key}"
        assert attrs_a == attrs_b, f"{stage}/{name} attributes"


def test_two_worker_dask_run_equals_one_worker_run(session_env, tmp_path, reference):
    from prefect.settings import PREFECT_API_URL, PREFECT_LOGGING_TO_API_ENABLED, temporary_settings

    from flows.stage import stage_flow

    one, one_seconds = reference
    two, _ = _copy_quantized(one, tmp_path / "two", workers=2)
    start = time.perf_counter()
    # logs stay local: the server stops with the session, before this process would flush them
    with temporary_settings(updates={PREFECT_API_URL: session_env["PREFECT_API_URL"],
                                     PREFECT_LOGGING_TO_API_ENABLED: False}):
        manifests = {stage: stage_flow(str(two.root), stage, 0, progress=False) for stage in STAGES}
    print(f"explore..score_final: 1 worker {one_seconds:.1f} s, 2 Dask workers {time.perf_counter() - start:.1f} s")

    for stage in ("explore", "regenerate"):
        summary = manifests[stage]["summary"]
        assert summary["workers"] == 2
        assert summary["shard_processes"] == 2  # both shards ran, each in its own worker process
        assert one.manifest(0, stage)["summary"]["shard_processes"] == 1
    assert manifests["explore"]["summary"]["candidates"] == 16
    _assert_same_results(one, two)
    assert not (two.stage_dir(0, "explore") / "scores.zarr").exists()  # sharded: scored by the score stage
    assert (one.stage_dir(0, "explore") / "scores.zarr").exists()  # one worker: scored while sampling


def test_sharded_stage_left_unfinished_resumes_to_the_same_pool(tmp_path, reference):
    """A runner whose second shard stopped after one batch: the stage refuses to complete; run again, the missing
    batches (only those) are sampled and the results equal the one-worker run."""
    from solrl_core.stages.registry import run_stage
    from solrl_core.stages.shards import Shard, prepare_shards, run_in_process, run_shard, use_shard_runner

    one, _ = reference
    two, cfg = _copy_quantized(one, tmp_path / "two", workers=2)
    ran = []

    def interrupted(ctx, stage, shards):
        prepare_shards(ctx, stage)
        first, second = shards
        ran.append(run_shard(ctx, stage, first))
        ran.append(run_shard(ctx, stage, Shard(second.index, second.first_batch, second.first_batch + 1)))
        return ran

    with use_shard_runner(interrupted), pytest.raises(SolrlError, match="3 of 8 batches are not done"):
        run_stage(two, cfg, 0, "explore", progress=False)
    assert not two.is_complete(0, "explore")
    pool = two.partial_dir(0, "explore") / "pool.zarr"
    assert read_table(pool, ["batch_done"])[0]["batch_done"].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]

    def resumed(ctx, stage, shards):
        reports = run_in_process(ctx, stage, shards)  # prepare (keeps the explore pool), then every shard
        ran.extend(reports)
        return reports

    with use_shard_runner(resumed):
        for stage in STAGES:
            run_stage(two, cfg, 0, stage, progress=False)
    # explore: shard 0 sampled its 4 batches, shard 1 one; on resume only shard 1's 3 missing ones; regenerate 1 + 1
    assert [r["sampled"] for r in ran] == [4, 1, 0, 3, 1, 1] and not any(r["left"] for r in ran)
    _assert_same_results(one, two)
