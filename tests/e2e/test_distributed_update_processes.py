"""The update stage on 2 gloo processes (torchrun), on two loopback machines (`solrl update-node`), and a node
joining the retry of a failed update: the same update as one process, on the same data (the sharding and the
node's logic in process: tests/unit/rl/test_distributed_update.py). Full fine-tuning on 2 ranks: against one
process, and killed in its sharded save then run again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import torch
import pytest
from safetensors.numpy import load_file

from cli_processes import free_port
from repo_paths import ROOT, SUPPORT
from solrl_core.config.schema import dump_config
from solrl_core.run.rundir import RunDir
from solrl_core.run.storage import write_text_atomic
from solrl_core.stages.runner import run_stage
from solrl_core.stages import update_launch
from update_runs import copy_for_update
from update_runs import ready_for_update  # noqa: F401 - a fixture: the run before its update

def _update(base: RunDir, cfg, tmp_path, processes: int, micro_batch: int | None = None) -> tuple[RunDir, dict]:
    run, cfg = copy_for_update(base, cfg, tmp_path / f"p{processes}-mb{micro_batch}", processes=processes,
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


@pytest.mark.e2e  # torchrun processes
def test_two_nodes_on_loopback_give_the_one_process_update(ready_for_update, one_process_12_per_micro_batch, tmp_path,
                                                          monkeypatch):
    """Two machines as torchrun sees them, on 127.0.0.1: this process runs the update stage (its torchrun: one gloo
    process, 2 nodes, c10d rendezvous), and `solrl update-node` in another process joins it with its own torchrun.
    Each rank trains on 12 of the 24 pairs: the update equals one process with micro-batches of 12, bit for bit."""
    for key, value in {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}.items():
        monkeypatch.setenv(key, value)
    base, cfg = ready_for_update
    run, cfg = copy_for_update(base, cfg, tmp_path / "two-nodes", nodes=2, processes=1,
                     rdzv_endpoint=f"127.0.0.1:{free_port()}")
    cfg.iterations = 1  # so that update-node, having joined iteration 0's update, is done
    write_text_atomic(run.config_path, dump_config(cfg))  # the run was started with these settings
    other = subprocess.Popen([sys.executable, "-m", "solrl", "update-node", "--run-dir", str(run.root)],
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
    run, cfg = copy_for_update(base, cfg, tmp_path / "two-nodes", nodes=2, processes=1,
                     rdzv_endpoint=f"127.0.0.1:{free_port()}")
    cfg.iterations = 1
    write_text_atomic(run.config_path, dump_config(cfg))
    other = subprocess.Popen([sys.executable, "-m", "solrl", "update-node", "--run-dir", str(run.root)],
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
            crash.setenv("PYTHONPATH", os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")]))
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


# ---------------------------------------------------------------- update-node after a failed update




@pytest.fixture(scope="module")
def full_on_two(ready_for_update, tmp_path_factory):
    """`train.adapter: full` (lr 1e-5, micro-batches of 12) and its update on 2 ranks: (config, run, summary)."""
    base, cfg = ready_for_update
    cfg = cfg.model_copy(deep=True)
    cfg.train = type(cfg.train).model_validate({**cfg.train.model_dump(), "adapter": "full", "micro_batch": 12})
    cfg.train.optimizer.lr = 1e-5
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        run, summary = _update(base, cfg, tmp_path_factory.mktemp("full"), 2)
    return cfg, run, summary


@pytest.mark.e2e  # torchrun processes
def test_full_fine_tuning_on_two_gloo_processes_gives_the_one_process_update(ready_for_update, full_on_two, tmp_path,
                                                                             monkeypatch):
    """`train.adapter: full` sharded with FSDP2 over 2 ranks (micro-batches of 12, 12 + 12 pairs; one rank padded
    where shares differ) against one process with the same micro-batches: the same losses and gradient norms to
    float32 rounding at the first optimizer step (the reduce-scatter sums in another order; the second step follows
    Adam-moved weights, which no tolerance bounds), and a sharded checkpoint that one process reads."""
    from solrl_core.models.backbones.cache import load_backbone
    from solrl_core.stages.checkpoints import POLICY_DIR, full_weights

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    base, _ = ready_for_update
    cfg, two, s2 = full_on_two
    one, s1 = _update(base, cfg, tmp_path / "one", 1, micro_batch=12)
    first1, first2 = _history(one)[0], _history(two)[0]  # before any AdamW step: later ones follow Adam-moved θ
    assert first1["pairs"] == first2["pairs"] == 24 and s1["step"] == s2["step"] == 2
    for key in ("loss", "policy_loss", "kl", "grad_norm"):
        assert first2[key] == pytest.approx(first1[key], rel=1e-5), key
    shards = sorted(p.name for p in (two.checkpoint_dir(0) / POLICY_DIR).iterdir())  # each rank its own: no pickle
    assert len(shards) == 2 and all(name.endswith(".safetensors") for name in shards), shards
    backbone = load_backbone(cfg)
    theta_old = full_weights(backbone, two.checkpoint_dir(0), "old")  # read by one process
    w0 = dict(backbone.transformer.named_parameters())
    assert theta_old.keys() == w0.keys() and any(not torch.equal(v, w0[k]) for k, v in theta_old.items())


@pytest.mark.e2e  # torchrun processes
def test_full_fine_tuning_killed_in_its_sharded_save_resumes_to_the_same_update(ready_for_update, full_on_two,
                                                                               session_env, tmp_path, monkeypatch):
    """`solrl stage update` of a full fine-tuning run on 2 ranks, SIGKILLed once both ranks have written their shards
    of the checkpoint and before the save returns (rank 0 kills the command and every process it started:
    tests/support/killed_in_save/sitecustomize.py): the
    stage is left unfinished with the shards in its partial folder, no process is left, and the stage run again (in
    this process, as the command runs it) gives the uninterrupted update bit for bit (its summary, every optimizer
    step's metrics, every shard's tensors, state.json)."""
    from solrl_core.stages.checkpoints import POLICY_DIR

    base, _ = ready_for_update
    cfg, reference, reference_summary = full_on_two
    run, cfg = copy_for_update(base, cfg, tmp_path / "killed", processes=2)
    write_text_atomic(run.config_path, dump_config(cfg))  # the run was started with these settings
    mark = str(os.getpgid(0))  # spared by the kill; on every process the command starts
    env = {**session_env, "OMP_NUM_THREADS": "1", "SOLRL_TEST_KILLED_SAVE": mark,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SUPPORT / "killed_in_save"), str(ROOT),
                                                       session_env.get("PYTHONPATH")]))}
    command = ["stage", "update", "--run-dir", str(run.root), "--iteration", "0", "--quiet"]
    killed = subprocess.run([sys.executable, "-m", "solrl", *command], env=env, cwd=ROOT, capture_output=True,
                            text=True, timeout=600, start_new_session=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not run.is_complete(0, "update")
    written = sorted(p.name for p in (run.partial_dir(0, "update") / "checkpoint" / POLICY_DIR).iterdir())
    assert len(written) == 2 and all(name.endswith(".safetensors") for name in written), written
    assert _left_running(mark) == []  # the other rank found its peer gone and stopped

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    summary = run_stage(run, cfg, 0, "update", progress=False)["summary"]  # what `solrl stage update` runs again
    assert run.is_complete(0, "update")
    assert {k: v for k, v in summary.items() if k not in ("seconds", "shards")} == {
        k: v for k, v in reference_summary.items() if k not in ("seconds", "shards")}
    assert _history(run) == _history(reference)
    for name in ("state.json", *(f"{POLICY_DIR}/{shard}" for shard in written)):
        mine, theirs = run.checkpoint_dir(0) / name, reference.checkpoint_dir(0) / name
        if name.endswith(".json"):
            assert json.loads(mine.read_text()) == json.loads(theirs.read_text())
            continue
        a, b = load_file(str(mine)), load_file(str(theirs))
        assert a.keys() == b.keys() and a
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{name} {key}")


def _left_running(mark: str, seconds: float = 120) -> list[str]:
    """Command lines of the processes whose environment carries `mark`, still alive after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        left = []
        for proc in psutil.process_iter():
            try:
                if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get("SOLRL_TEST_KILLED_SAVE") == mark:
                    left.append(" ".join(proc.cmdline())[:200])
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)
