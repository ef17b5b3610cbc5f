"""The update stage on 2 gloo processes (torchrun) against the same update in one process, on the same data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from conftest import ROOT, TINY, free_port
from solrl_core.config import dump_config, load_config
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.rl.distributed import GradientSync
from solrl_core.rundir import RunDir
from solrl_core.storage import write_text_atomic
from solrl_core.runs import prepare_run
from solrl_core.seeds import derived_generator, randn_rows
from solrl_core.stages.context import StageContext
from solrl_core.stages.draws import PURPOSE_TRAIN_NOISE
from solrl_core.stages.registry import run_stage
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
    assert summary == {**ref_summary, "seconds": summary["seconds"]}
    assert _history(run) == _history(ref_run)
    for name, tensors in _checkpoint(ref_run).items():
        for key, value in tensors.items():
            np.testing.assert_array_equal(_checkpoint(run)[name][key], value, err_msg=f"{name} {key}")


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-30))


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
    c1, c2 = _checkpoint(one), _checkpoint(two)
    # Adam divides each gradient element by its own running scale, so the rounding of a near-zero element's gradient
    # can move that weight by a visible part of one step (CI saw 0.19% of a step: 1.9e-6 at lr 1e-3); and a tensor
    # whose gradient is a near-cancelling sum (exp_avg of ~1e-8 here) keeps the rounding of its terms, not of its
    # size (1.4e-4 of its norm was seen). So: each weight within 2% of one step, each tensor within 1e-3 of its norm;
    # a rank's gradient lost or counted twice moves many weights by whole steps and the moments by ~50%.
    step_atol = 0.02 * cfg.train.optimizer.lr
    for name in c1:
        assert c1[name].keys() == c2[name].keys()
        for key in c1[name]:
            np.testing.assert_allclose(c2[name][key], c1[name][key], rtol=1e-5, atol=step_atol, err_msg=f"{name} {key}")
            assert _relative(c1[name][key], c2[name][key]) < 1e-3, (name, key)
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
