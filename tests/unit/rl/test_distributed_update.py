"""The distributed update without processes: each rank's share of the pairs and of the training noise, the setups
refused before launching, and `solrl update-node`'s joins, retries and refusals (on torchrun processes:
tests/e2e/test_distributed_update_processes.py)."""

from __future__ import annotations


import pytest
import torch

from repo_paths import TINY
from solrl_core.config.schema import dump_config
from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.run.rundir import RunDir
from solrl_core.run.storage import write_text_atomic
from solrl_core.testing.fake_cuda import fake_cuda
from solrl_core.seeds import derived_generator, randn_rows
from solrl_core.stages.context import StageContext
from solrl_core.stages.draws import PURPOSE_TRAIN_NOISE
from solrl_core.stages import update_node
from solrl_core.stages.update_node import join_updates
from solrl_core.stages.update_launch import launch_update
from update_runs import Rank, copy_for_update
from update_runs import ready_for_update  # noqa: F401 - a fixture: the run before its update

def test_shards_partition_the_pairs():
    rows = torch.arange(11)
    shards = [Rank(r, 3).shard(rows) for r in range(3)]
    assert torch.equal(torch.cat(shards), rows)
    assert [len(s) for s in shards] == [len(s) for s in torch.tensor_split(rows, 3)] == [4, 4, 3]
    assert Rank(1, 3).is_writer is False and Rank(0, 3).is_writer is True
    with pytest.raises(SolrlError, match="train.processes"):
        Rank(0, 4).shard(torch.arange(3))


# (pairs, latent shape): 16-value blocks aligned with rows; not aligned, with the last 16 values drawn again
# (735 = 45 * 16 + 15); fewer than 16 values (drawn one at a time by torch); 18 values (the last 16 redrawn)
NOISE_SHAPES = [(24, (3, 8, 8)), (7, (105,)), (5, (3,)), (2, (9,)), (11, (1, 5, 5))]


@pytest.mark.parametrize("n_pairs, latent", NOISE_SHAPES)
def test_each_rank_draws_its_slice_of_the_training_noise_alone(n_pairs, latent, monkeypatch):
    """Rank r of W gets exactly rows [start, stop) of the one-process draw, and draws no more than its rows (plus
    two 16-value blocks; the uniforms it skips go through a buffer of `discard_chunk` values)."""
    def draw_all():
        return torch.randn((n_pairs, *latent), generator=derived_generator(3, 1, PURPOSE_TRAIN_NOISE, 0))

    full = draw_all()
    row = full[0].numel()
    sizes = []
    for name in ("randn", "empty"):
        def spy(*args, _name=name, _real=getattr(torch, name), **kwargs):
            tensor = _real(*args, **kwargs)
            sizes.append((_name, tensor.numel()))
            return tensor
        monkeypatch.setattr(torch, name, spy)
    for world in (1, 2, 3, 4, 7):
        if world > n_pairs:
            continue
        for rank in range(world):
            start, stop = Rank(rank, world).shard_range(n_pairs)
            sizes.clear()
            share = randn_rows(derived_generator(3, 1, PURPOSE_TRAIN_NOISE, 0), n_pairs, latent, start, stop,
                               discard_chunk=64)
            assert share.shape == (stop - start, *latent)
            assert torch.equal(share, full[start:stop]), (world, rank)
            if n_pairs * row >= 16:
                drawn = sum(n for name, n in sizes if name == "randn")
                assert drawn <= (stop - start) * row + 2 * 16, (world, rank, sizes)
                assert max(n for name, n in sizes if name == "empty") <= max((stop - start) * row, 64), sizes


def test_nccl_on_a_cpu_is_refused_before_launching(ready_for_update):
    run, cfg = ready_for_update
    cfg = cfg.model_copy(deep=True)
    cfg.train.processes, cfg.train.dist_backend = 2, "nccl"
    with pytest.raises(SolrlError, match="train.dist_backend: nccl needs CUDA"):
        launch_update(StageContext(run, cfg, 0, progress=False))


def test_a_pinned_gpu_is_refused_with_several_processes(ready_for_update):
    run, cfg = ready_for_update
    cfg = cfg.model_copy(deep=True)
    cfg.train.processes = 2
    cfg.model.device = "cuda:1"
    with pytest.raises(SolrlError, match="model.device: with several update processes use 'cuda'"):
        launch_update(StageContext(run, cfg, 0, progress=False))


def test_bad_process_settings_name_the_key():
    with pytest.raises(ConfigError, match="train.processes"):
        load_config(TINY, ["train.processes=0"])
    with pytest.raises(ConfigError, match="train.dist_backend"):
        load_config(TINY, ["train.dist_backend=mpi"])
    for endpoint in ([], ["train.rdzv_endpoint=10.0.0.1"], ["train.rdzv_endpoint=:29400"]):
        with pytest.raises(ConfigError, match="train.rdzv_endpoint: with train.nodes = 2 give HOST:PORT"):
            load_config(TINY, ["train.nodes=2", *endpoint])
    assert load_config(TINY, ["train.nodes=2", "train.rdzv_endpoint=node0:29400"]).train.nodes == 2


def test_update_node_refuses_a_one_machine_run(ready_for_update):
    run, _ = ready_for_update
    with pytest.raises(SolrlError, match="train.nodes is 1 in .*nothing to join"):
        join_updates(run)


# ---------------------------------------------------------------- update-node after a failed update


def _node_run(base: RunDir, cfg, path, **train) -> RunDir:
    """A copy of the run started with 2 nodes and 1 iteration (its frozen config says so): what `solrl update-node`
    reads, and which it is done with once iteration 0 is updated."""
    run, cfg = copy_for_update(base, cfg, path, **{"nodes": 2, "processes": 1, "rdzv_endpoint": "127.0.0.1:29400", **train})
    cfg.iterations = 1
    write_text_atomic(run.config_path, dump_config(cfg))
    return run


class Launches:
    """`launch_update` of one machine, faked: each call takes the next outcome (an exception to raise, or a
    summary to return); `before` runs first on each call (what the stage machine did meanwhile)."""

    def __init__(self, *outcomes, before=None):
        self.outcomes, self.before, self.calls = list(outcomes), before, 0

    def __call__(self, ctx):
        self.calls += 1
        if self.before is not None:
            self.before(ctx, self.calls)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


TORCHRUN_FAILED = RuntimeError("distributed update of iteration 0 failed (torchrun exit 1, its output is above)")


def _join(run, monkeypatch, launches, **kwargs) -> tuple[dict, list[str]]:
    monkeypatch.setattr(update_node, "launch_update", launches)
    lines = []
    return join_updates(run, poll_seconds=0, say=lines.append, **kwargs), lines


def test_update_node_joins_a_failed_update_again(ready_for_update, tmp_path, monkeypatch):
    run = _node_run(*ready_for_update, tmp_path / "run")
    launches = Launches(TORCHRUN_FAILED, {"loss": 0.5})
    summaries, lines = _join(run, monkeypatch, launches)
    assert summaries == {0: {"loss": 0.5}} and launches.calls == 2
    assert lines[1:] == ["the update of iteration 0 failed on this machine; joining it again for the stage's retry",
                         "joining the update of iteration 0 again (attempt 2 of 3): 1 process(es) here, 2 machines "
                         "at 127.0.0.1:29400"]


def test_update_node_gives_up_after_its_attempts(ready_for_update, tmp_path, monkeypatch):
    run = _node_run(*ready_for_update, tmp_path / "run")
    launches = Launches(TORCHRUN_FAILED, TORCHRUN_FAILED, {"loss": 0.5})
    with pytest.raises(SolrlError, match=r"^the update of iteration 0 failed on this machine 2 time\(s\) .*run "
                       r"`solrl update-node --run-dir .*` again here \(--attempts N"):
        _join(run, monkeypatch, launches, attempts=2)
    assert launches.calls == 2
    with pytest.raises(SolrlError, match="--attempts 0 is out of range: give 1 or more"):
        join_updates(run, attempts=0)


def test_an_error_the_user_must_fix_stops_update_node_at_once(ready_for_update, tmp_path, monkeypatch):
    run = _node_run(*ready_for_update, tmp_path / "run")
    launches = Launches(SolrlError("guidance.train = 3.5 needs a backbone with distilled guidance"), {"loss": 0.5})
    with pytest.raises(SolrlError, match="guidance.train = 3.5"):
        _join(run, monkeypatch, launches)
    assert launches.calls == 1


def test_update_node_goes_on_once_the_update_is_committed(ready_for_update, tmp_path, monkeypatch):
    """A forced re-run of a complete update fails here: the completion it replaces is no reason to go on (joined
    again), the stage machine's new completion is (not joined a third time)."""
    run = _node_run(*ready_for_update, tmp_path / "run")
    run.stage_dir(0, "update").mkdir(parents=True)
    run.complete(0, "update", {"loss": 1.0})

    def stage_machine(ctx, call):
        if call == 2:  # the update was committed there, and this machine's torchrun failed after it
            ctx.run.complete(0, "update", {"loss": 0.25})

    launches = Launches(TORCHRUN_FAILED, TORCHRUN_FAILED, {"loss": 0.5}, before=stage_machine)
    summaries, lines = _join(run, monkeypatch, launches, iteration=0, force=True)
    assert summaries == {0: {"loss": 0.25}} and launches.calls == 2
    assert lines[-1] == "the update of iteration 0 is complete (committed by the stage machine); going on"


def test_update_node_refuses_more_processes_than_gpus_before_waiting(ready_for_update, tmp_path, monkeypatch):
    base, cfg = ready_for_update
    run = _node_run(base, cfg.model_copy(update={"model": cfg.model.model_copy(update={"device": "cuda"})}),
                    tmp_path / "run", processes=4)
    launches = Launches({"loss": 0.5})
    with fake_cuda(device_count=2):
        with pytest.raises(SolrlError, match="train.processes is 4 .* sees 2 GPUs; set train.processes to 2"):
            _join(run, monkeypatch, launches)
    assert launches.calls == 0
