"""Placement: which devices `orchestration.devices` names, the environment that pins each worker process to its
device (on a faked 4-GPU machine), the stage table, and the config errors (real worker processes:
tests/e2e/test_placement_workers.py)."""

from __future__ import annotations


import pytest

from played_gpus import four_gpus  # noqa: F401 - a fixture
from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError, SolrlError
from solrl_core import placement
from solrl_core.placement import check_devices, pinned_device, placed_config, resolve_devices, worker_env
from solrl_core.rl.distributed import check_setup
from solrl_core.testing.fake_cuda import fake_cuda


def test_auto_is_every_gpu_of_a_cuda_model_else_the_model_device(four_gpus):
    assert resolve_devices(load_config(TINY, ["model.device=cuda"])) == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert resolve_devices(load_config(TINY)) == ["cpu"]  # model.device: cpu
    assert resolve_devices(load_config(TINY, ["orchestration.devices=[cuda:2, cuda:0]"])) == ["cuda:2", "cuda:0"]
    assert resolve_devices(load_config(TINY, ["orchestration.devices=[cpu, cpu, cpu]"])) == ["cpu"] * 3


def test_shard_k_sees_only_gpu_k(four_gpus, monkeypatch):
    devices = resolve_devices(load_config(TINY, ["model.device=cuda"]))
    assert [worker_env(d)["CUDA_VISIBLE_DEVICES"] for d in devices] == ["0", "1", "2", "3"]
    assert worker_env("cpu")["CUDA_VISIBLE_DEVICES"] == ""  # a CPU worker sees no GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")  # this process was itself given GPUs 4-7
    assert [worker_env(d)["CUDA_VISIBLE_DEVICES"] for d in devices] == ["4", "5", "6", "7"]
    assert worker_env("cuda:1")["SOLRL_DEVICE"] == "cuda:5"
    with pytest.raises(SolrlError, match="cuda:4 is not visible"):
        worker_env("cuda:4")


def test_a_worker_that_sees_several_gpus_is_refused(four_gpus):
    with pytest.raises(SolrlError, match="sees 4 GPUs; start one Dask worker per GPU"):
        pinned_device()


def test_rewards_follow_the_model_onto_the_shard_device():
    cfg = load_config(TINY, ["eval.rewards={embedded: 1.0, jpeg: 0.5}", "reward_models.jpeg.batch_size=3"])
    placed = placed_config(cfg, "cuda")
    assert placed.model.device == "cuda"
    assert placed.reward_models == {"embedded": {"device": "cuda"}, "jpeg": {"batch_size": 3, "device": "cuda"}}
    assert placed_config(cfg, "cpu") is cfg  # already there: nothing changes


def test_stage_table_is_what_every_list_reads(tmp_path):
    from solrl_core.method import AUDIT, BY_NAME as STEPS, ITERATION
    from solrl_core.run.rundir import STAGES, RunDir
    from solrl_core.run.staleness import missing_inputs
    from solrl_core.run.stage_table import BY_NAME, TABLE
    from solrl_core.stages.shards import load, work_ref
    from solrl.tasks.stage_task import STAGE_TASKS

    assert STAGES == ("quantize", "explore", "score_explore", "select", "regenerate", "score_final", "update")
    assert tuple(step.name for step in ITERATION) == STAGES and AUDIT.name == "audit"
    assert tuple(STAGE_TASKS) == STAGES and all(STAGE_TASKS[s].name == s for s in STAGES)
    assert set(STEPS) == set(BY_NAME) and all(STEPS[s.name].stage is s for s in TABLE)
    assert {step.name for step in STEPS.values() if step.work} == {
        "quantize", "explore", "score_explore", "regenerate", "score_final", "update", "audit"}
    for step in STEPS.values():  # every work function travels to another process by its name and back
        assert all(load(work_ref(work)) is work for work in step.work)
        assert set(step.stage.requires) <= set(BY_NAME) and step.writes
    assert BY_NAME["update"].needs_previous_checkpoint and not BY_NAME["score_explore"].needs_previous_checkpoint

    empty = RunDir(tmp_path / "run")  # nothing complete
    assert missing_inputs(empty, 3, "regenerate") == [(2, "update"), (3, "select")]
    assert missing_inputs(empty, 3, "quantize") == [(2, "update")]


@pytest.mark.parametrize("override,message", [
    ("orchestration.devices=[gpu0]", "'gpu0' is not a device"),
    ("orchestration.devices=[cuda:0, cuda:0]", "a GPU is listed twice"),
    ("orchestration.devices=[]", "at least one device"),
    ("orchestration.workers={explore: 2}", "orchestration.workers was replaced by orchestration.devices"),
    ("orchestration.dask_address=127.0.0.1:8786", "expected tcp://HOST:PORT"),
])
def test_bad_placement_settings_are_named(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(TINY, [override])


def test_more_update_processes_than_gpus_is_refused_naming_the_key(monkeypatch):
    """Every update rank runs on a GPU of its own: 4 processes on a machine that sees 2 GPUs are refused by the
    preflight (check_devices) and when the update launches (check_setup), in one line saying what to set."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cfg = load_config(TINY, ["model.device=cuda", "train.processes=4"])
    refused = r"^train.processes is 4 \(one GPU per update process, on each training machine\), but this machine " \
              r"sees 2 GPUs; set train.processes to 2 or less$"
    with fake_cuda(device_count=2):
        with pytest.raises(SolrlError, match=refused):
            check_devices(cfg)
        with pytest.raises(SolrlError, match=refused):
            check_setup("nccl", "cuda", processes=4)
        check_devices(cfg, update=False)  # a command that runs no update (an evaluation) needs one GPU
        check_setup("nccl", "cuda", processes=2)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # what this process was given is part of the answer
        with pytest.raises(SolrlError, match=r"sees 2 GPUs \(CUDA_VISIBLE_DEVICES=3,5\); set train.processes to 2"):
            check_setup("gloo", "cuda", processes=3)
    with fake_cuda(device_count=1):
        with pytest.raises(SolrlError, match=r"sees 1 GPU \(CUDA_VISIBLE_DEVICES=3,5\); set train.processes to 1 or"):
            check_devices(cfg)
    with fake_cuda(device_count=4):
        check_devices(cfg)
        check_setup("nccl", "cuda", processes=4)
    with fake_cuda(device_count=1):  # processes on the CPU need no GPU, but a core each
        monkeypatch.setattr(placement, "cpu_cores", lambda: 4)
        check_devices(load_config(TINY, ["train.processes=4"]))
        check_setup("gloo", "cpu", processes=4)
        monkeypatch.setattr(placement, "cpu_cores", lambda: 2)
        with pytest.raises(SolrlError, match=r"^train.processes is 4 \(update processes on this machine's CPU, each "
                           r"with a copy of the model\), but it has 2 CPU cores for this process; set train.processes "
                           r"to 2 or less$"):
            check_devices(load_config(TINY, ["train.processes=4"]))


def test_cuda_update_processes_on_a_machine_without_gpus_are_refused(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SolrlError, match=r"^train.processes is 2 .* sees no GPUs; run the update on a machine with "
                       r"GPUs$"):
        check_setup("gloo", "cuda", processes=2)


def test_more_update_ranks_than_device_workers_is_refused_before_any_work(monkeypatch):
    """With several devices the update's ranks run on the device workers: more ranks than workers cannot start."""
    from solrl_core.config.loading import load_config
    from solrl_core.placement import check_devices, update_on_device_workers

    cfg = load_config(TINY, ["orchestration.devices=[cpu, cpu]", "train.processes=3"])
    assert update_on_device_workers(cfg)
    with pytest.raises(SolrlError, match=r"train.processes is 3, but the update's ranks run on the 2 device workers "
                                         r"\(orchestration.devices: cpu, cpu\); set train.processes to 2 or less"):
        check_devices(cfg)
    check_devices(load_config(TINY, ["orchestration.devices=[cpu, cpu]", "train.processes=2"]))
    monkeypatch.setattr(placement, "cpu_cores", lambda: 4)  # torchrun's 3 CPU ranks fit this machine's cores
    across = load_config(TINY, ["orchestration.devices=[cpu, cpu]", "train.processes=3", "train.nodes=2",
                                "train.rdzv_endpoint=127.0.0.1:29400"])
    assert not update_on_device_workers(across)  # torchrun on every machine: its own ranks (not the workers')
    check_devices(across)


def test_a_one_machine_update_of_several_ranks_runs_on_device_workers(monkeypatch):
    """`train.processes` > 1 on one machine: each rank is a device worker that keeps its model (on a CPU, `auto` is
    the model's device once per rank), so no torchrun rank loads beside a model the flow process holds; a list of
    one GPU for two ranks (rank 0 would share GPU 0 with the flow's copy) is refused."""
    from solrl_core.placement import splits_over_devices, update_on_device_workers

    monkeypatch.setattr(placement, "cpu_cores", lambda: 2)
    two = load_config(TINY, ["train.processes=2"])
    assert resolve_devices(two) == ["cpu", "cpu"] and splits_over_devices(two) and update_on_device_workers(two)
    check_devices(two)
    with pytest.raises(SolrlError, match=r"^train.processes is 3 .* 2 CPU cores .*; set train.processes to 2 or less$"):
        check_devices(load_config(TINY, ["train.processes=3"]))
    across = load_config(TINY, ["train.processes=2", "train.nodes=2", "train.rdzv_endpoint=127.0.0.1:29400"])
    assert resolve_devices(across) == ["cpu"] and not update_on_device_workers(across)  # torchrun on each machine
    with fake_cuda(device_count=2):
        one_gpu = load_config(TINY, ["model.device=cuda", "orchestration.devices=[cuda:0]", "train.processes=2",
                                     "train.dist_backend=nccl"])
        assert update_on_device_workers(one_gpu)
        with pytest.raises(SolrlError, match=r"train.processes is 2, but the update's ranks run on the 1 device "
                                             r"workers \(orchestration.devices: cuda:0\); set train.processes to 1"):
            check_devices(one_gpu)
