"""Work split over devices, in process: the shard plan, per-batch completion markers, a sharded stage left
unfinished resuming to the same pool, and the device workers' memory (on worker processes:
tests/e2e/test_explore_shards_processes.py)."""

from __future__ import annotations


import numpy as np
import pytest

from sharded_runs import STAGES, UPDATE_THREADS, assert_same_results, copy_quantized
from sharded_runs import reference  # noqa: F401 - a fixture: the one-device run
from solrl_core.torch_threads import intra_op_threads
from solrl_core.errors import SolrlError
from solrl_core.run.pool import CandidateWriter, read_table
from solrl_core.stages.shards import plan_shards


pytestmark = pytest.mark.slow  # whole iterations or models: `make test` runs it, `make test-fast` not


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


def test_sharded_stage_left_unfinished_resumes_to_the_same_pool(tmp_path, reference):
    """A runner whose second shard stopped after one batch: the stage refuses to complete; run again, the missing
    batches (only those) are sampled and the results equal the one-device run."""
    from solrl_core.stages.runner import run_stage
    from solrl_core.stages.shards import InProcess, Shard, prepare, run_shard, use_shard_runner

    one, _ = reference
    two, cfg = copy_quantized(one, tmp_path / "two", "orchestration.devices=[cpu, cpu]")
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
        for stage in STAGES:  # the update with the reference's threads: another count sums in another order
            with intra_op_threads(UPDATE_THREADS if stage == "update" else None):
                run_stage(two, cfg, 0, stage, progress=False)
    sampled = [r["sampled"] for r in ran if "sampled" in r]
    # explore: shard 0 sampled its 4 batches, shard 1 one; on resume only shard 1's 3 missing ones; regenerate 1 + 1
    assert sampled == [4, 1, 0, 3, 1, 1] and not any(r["left"] for r in ran if "left" in r)
    assert [r["scored"] for r in ran if "scored" in r] == [8, 8, 4, 4]  # both score stages, in two shards
    assert_same_results(one, two)


def test_device_workers_share_the_hosts_memory_instead_of_dasks_per_core_default(monkeypatch):
    """Dask's default gives a worker the host's memory divided by its cores, and kills it at 95 % of that: a worker
    loading a FLUX.1-sized model (~31 GB of host memory for a while) died on a 224-thread node. Each device worker
    gets an equal share of the host's memory instead."""
    from distributed.system import MEMORY_LIMIT

    from solrl.tasks.dask_shards import worker_specs

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    specs = worker_specs(["cuda:0", "cuda:1", "cuda:2", "cuda:3"], [])
    assert {spec["options"]["memory_limit"] for spec in specs.values()} == {MEMORY_LIMIT // 4}
    assert [spec["options"]["env"]["CUDA_VISIBLE_DEVICES"] for spec in specs.values()] == ["0", "1", "2", "3"]
