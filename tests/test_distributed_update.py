"""The update stage on 2 gloo processes (torchrun) against the same update in one process, on the same data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from conftest import ROOT, TINY, free_port
from solrl_core.config.schema import dump_config
from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.rl.distributed import GradientSync
from solrl_core.run.rundir import RunDir
from solrl_core.run.storage import write_text_atomic
from solrl_core.testing.fake_cuda import fake_cuda
from solrl_core.runs import prepare_run
from solrl_core.models.seeds import derived_generator, randn_rows
from solrl_core.stages.context import StageContext
from solrl_core.stages.draws import PURPOSE_TRAIN_NOISE
from solrl_core.stages.runner import run_stage
from solrl_core.stages import update_launch, update_node
from solrl_core.stages.update_node import join_updates
from solrl_core.stages.update_launch import launch_update

BEFORE_UPDATE = ("quantize", "explore", "score_explore", "select", "regenerate", "score_final")


@pytest.fixture(scope="module")
def ready_for_update(tmp_path_factory, one_torch_thread):
    """A tiny run whose iteration 0 is complete up to score_final (8 samples x 3 times = 24 pairs), 2 steps."""
    cfg = load_config(TINY, ["train.optimizer_steps=2"])
    run = RunDir(tmp_path_factory.mktemp("dist") / "base")
    prepare_run(run, cfg)
    for stage in BEFORE_UPDATE:
        run_stage(run, cfg, 0, stage, progress=False)
    return run, cfg


def _copy(base: RunDir, cfg, path, **train) -> tuple[RunDir, object]:
    """A copy of the run ready for its update, and its config with `train` settings changed."""
    run = RunDir(path)
    shutil.copytree(base.root, run.root)
    cfg = cfg.model_copy(deep=True)
    cfg.train = type(cfg.train).model_validate({**cfg.train.model_dump(), **train})
    return run, cfg


def _update(base: RunDir, cfg, tmp_path, processes: int, micro_batch: int | None = None) -> tuple[RunDir, dict]:
    run, cfg = _copy(base, cfg, tmp_path / f"p{processes}-mb{micro_batch}", processes=processes,
                     micro_batch=micro_batch or cfg.train.micro_batch)
    return run, run_stage(run, cfg, 0, "update", progress=False)["summary"]


@pytest.fixture(scope="module")
def one_process_12_per_micro_batch(ready_for_update, tmp_path_factory):
    """The one-process update with micro-batches of 12 (12 + 12 pairs): what each of two ranks computes."""
    base, cfg = ready_for_update
    return _update(base, cfg, tmp_path_factory.mktemp("reference"), 1, micro_batch=12)


def _assert_same_update(run: RunDir, summary: dict, reference: tuple[RunDir, dict]) -> None:
    """The same summary, per-step history and checkpoint tensors as `reference`, bit for bit."""
    ref_run, ref_summary = reference
    where = ("seconds", "shards")  # when and in which processes it ran
    assert {k: v for k, v in summary.items() if k not in where} == {k: v for k, v in ref_summary.items() if k not in where}
    assert _history(run) == _history(ref_run)
    for name, tensors in _checkpoint(ref_run).items():
        for key, value in tensors.items():
            np.testing.assert_array_equal(_checkpoint(run)[name][key], value, err_msg=f"{name} {key}")


def _checkpoint(run: RunDir) -> dict[str, dict[str, np.ndarray]]:
    ckpt = run.checkpoint_dir(0)
    return {name: load_file(str(ckpt / name)) for name in ("adapters.safetensors", "ema.safetensors",
                                                            "optimizer.safetensors")}


def _history(run: RunDir) -> list[dict]:
    return json.loads((run.stage_dir(0, "update") / "metrics.json").read_text())["steps"]


@pytest.mark.e2e  # torchrun processes
def test_two_gloo_processes_give_the_one_process_update(ready_for_update, one_process_12_per_micro_batch, tmp_path,
                                                        monkeypatch):
    """24 pairs, micro_batch 16: one process runs micro-batches of 16 + 8, each of the 2 ranks one of 12."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the ranks compute with one thread, as this process
    base, cfg = ready_for_update
    two, s2 = _update(base, cfg, tmp_path, 2)
    assert not any(p.name.endswith(".partial") for p in two.iteration_dir(0).iterdir())
    assert sorted(p.name for p in two.checkpoint_dir(0).iterdir()) == [
        "adapters.safetensors", "ema.safetensors", "optimizer.safetensors", "state.json"]

    # Same micro-batches (12 + 12 in one process): the sum of the two shards' gradients is the one-process
    # accumulation, so every number and every tensor is the same bit for bit.
    _assert_same_update(two, s2, one_process_12_per_micro_batch)

    # The configured micro-batch (16 + 8 in one process): batched matmuls round differently, nothing else.
    one, s1 = _update(base, cfg, tmp_path, 1)
    for key in ("loss", "policy_loss", "kl", "grad_norm"):
        assert s2[key] == pytest.approx(s1[key], rel=1e-5), key
    assert s2["step"] == s1["step"] == 2 and s2["old_eta"] == s1["old_eta"]
    h1, h2 = _history(one), _history(two)
    assert [h["pairs"] for h in h2] == [h["pairs"] for h in h1] == [24, 24]
    for a, b in zip(h1, h2):
        for key in ("loss", "policy_loss", "kl", "x0_pos_err", "x0_neg_err", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-12), key
    # Not the checkpoints: Adam divides each gradient element by its own running scale, so the rounding of a
    # near-zero element's gradient moves its weight by a visible part of a step (2.14e-5 at lr 1e-3 was seen), and no
    # tolerance on Adam-moved weights is both safe and meaningful. The bit-for-bit comparison above (the same
    # micro-batches) is what shows that no rank's gradient is lost or counted twice; here the losses and gradient
    # norms show that a different micro-batching only rounds differently.
    c1 = _checkpoint(one)
    init = load_file(str(base.checkpoint_dir(-1) / "adapters.safetensors"))
    assert any(not np.array_equal(init[k], c1["adapters.safetensors"][k]) for k in init if k.startswith("default."))
    state1, state2 = (json.loads((r.checkpoint_dir(0) / "state.json").read_text()) for r in (one, two))
    assert state1 == state2


class Rank(GradientSync):
    """Rank `rank` of `world_size`, without a process group (what to shard only)."""

    def __init__(self, rank, world_size):
        self.rank, self.world_size = rank, world_size


@pytest.mark.e2e  # torchrun processes
def test_two_nodes_on_loopback_give_the_one_process_update(ready_for_update, one_process_12_per_micro_batch, tmp_path,
                                                          monkeypatch):
    """Two machines as torchrun sees them, on 127.0.0.1: this process runs the update stage (its torchrun: one gloo
    process, 2 nodes, c10d rendezvous), and `solrl update-node` in another process joins it with its own torchrun.
    Each rank trains on 12 of the 24 pairs: the update equals one process with micro-batches of 12, bit for bit."""
    for key, value in {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}.items():
        monkeypatch.setenv(key, value)
    base, cfg = ready_for_update
    run, cfg = _copy(base, cfg, tmp_path / "two-nodes", nodes=2, processes=1,
                     rdzv_endpoint=f"127.0.0.1:{free_port()}")
    cfg.iterations = 1  # so that update-node, having joined iteration 0's update, is done
    write_text_atomic(run.config_path, dump_config(cfg))  # the run was started with these settings
    other = subprocess.Popen([sys.executable, "-m", "flows.cli", "update-node", "--run-dir", str(run.root)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        summary = run_stage(run, cfg, 0, "update", progress=False)["summary"]
        out, err = other.communicate(timeout=300)
    finally:
        other.kill()
    assert other.returncode == 0, err[-3000:]
    assert "joining the update of iteration 0: 1 process(es) here, 2 machines at 127.0.0.1:" in err
    assert json.loads(out) == {"0": {k: v for k, v in summary.items() if k != "seconds"}}  # each node's summary
    _assert_same_update(run, summary, one_process_12_per_micro_batch)


@pytest.mark.e2e  # torchrun processes
def test_update_node_joins_the_retry_of_a_failed_update(ready_for_update, one_process_12_per_micro_batch, tmp_path,
                                                         monkeypatch):
    """As above, but the stage machine's first attempt crashes (its rank dies inside the process group, so this
    machine's rank fails too): `solrl update-node` joins the retry of the same iteration, which gives the one-process
    update bit for bit."""
    for key, value in {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}.items():
        monkeypatch.setenv(key, value)
    base, cfg = ready_for_update
    run, cfg = _copy(base, cfg, tmp_path / "two-nodes", nodes=2, processes=1,
                     rdzv_endpoint=f"127.0.0.1:{free_port()}")
    cfg.iterations = 1
    write_text_atomic(run.config_path, dump_config(cfg))
    other = subprocess.Popen([sys.executable, "-m", "flows.cli", "update-node", "--run-dir", str(run.root)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err, rejoining = [], threading.Event()

    def read_err():
        for line in other.stderr:
            err.append(line)
            if "joining it again for the stage's retry" in line:
                rejoining.set()

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    try:
        with monkeypatch.context() as crash:
            crash.setattr(update_launch, "WORKER_MODULE", "crashing_update_worker")
            crash.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
            with pytest.raises(RuntimeError, match="distributed update of iteration 0 failed"):
                run_stage(run, cfg, 0, "update", progress=False)
        # The retry starts once update-node's failed torchrun has ended: on loopback either machine may have hosted
        # the failed attempt's rendezvous store, which a retry must not meet (rdzv_endpoint on the stage machine)
        assert rejoining.wait(timeout=240), "".join(err)[-3000:]
        summary = run_stage(run, cfg, 0, "update", progress=False)["summary"]
        out = other.stdout.read()
        other.wait(timeout=300)
        reader.join(timeout=10)
    finally:
        other.kill()
    err = "".join(err)
    assert other.returncode == 0, err[-3000:]
    assert "crashed (injected by the test)" not in err  # the crash was on the stage machine: this one's rank failed
    assert "joining the update of iteration 0 again (attempt 2 of 3): 1 process(es) here, 2 machines" in err
    assert json.loads(out) == {"0": {k: v for k, v in summary.items() if k != "seconds"}}
    _assert_same_update(run, summary, one_process_12_per_micro_batch)


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
    run, cfg = _copy(base, cfg, path, **{"nodes": 2, "processes": 1, "rdzv_endpoint": "127.0.0.1:29400", **train})
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
