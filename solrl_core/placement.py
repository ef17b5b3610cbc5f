"""Where sampling and scoring run: the devices of `orchestration.devices`, and one worker process pinned to each.

A worker for `cuda:k` starts with CUDA_VISIBLE_DEVICES set to that GPU alone (before torch initialises CUDA), so the
process sees one GPU, `cuda`, and puts its model and rewards there; a worker for `cpu` sees no GPU. A worker of a
Dask cluster started by hand declares its device the same way (its environment), plus the `device` resource that
routes shards to it (see docs/operations.md). `SOLRL_DEVICE` names the device in the manifests when it is set; otherwise
the name is derived from CUDA_VISIBLE_DEVICES.

With one device the stages run in the calling process as they always did; its model and rewards go on that device.
"""

from __future__ import annotations

import os
import re
import socket

from solrl_core.errors import SolrlError

RESOURCE = "device"  # the Dask worker resource a shard needs one of (each worker has exactly one)
LABEL_ENV = "SOLRL_DEVICE"
_DEVICE = re.compile(r"^(cpu|cuda:\d+)$")


def check_device_list(devices: list[str]) -> None:
    """A ValueError naming the first entry of `orchestration.devices` that is not `cpu` or `cuda:N`."""
    if not devices:
        raise ValueError("orchestration.devices: list at least one device, or use auto")
    for device in devices:
        if not _DEVICE.match(str(device)):
            raise ValueError(f"orchestration.devices: '{device}' is not a device (use cpu or cuda:N, e.g. "
                             "[cuda:0, cuda:1])")
    cuda = [d for d in devices if d != "cpu"]
    if len(set(cuda)) != len(cuda):
        raise ValueError(f"orchestration.devices: a GPU is listed twice ({devices}); one worker per GPU")


def check_present(device: str, setting: str) -> None:
    """A SolrlError naming `setting` and the devices this machine has when `device` is not one of them."""
    if device == "cpu":  # every machine has it (and importing torch takes seconds)
        return
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError:
        raise SolrlError(f"{setting}: '{device}' is not a device (use cpu, cuda or cuda:N)") from None
    if dev.type != "cuda":
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if (dev.index or 0) < count:
        return
    here = "no CUDA device (cpu only)" if count == 0 else f"{count} CUDA device(s), cuda:0 to cuda:{count - 1}"
    raise SolrlError(f"{setting} is {device}, but this machine has {here}; set {setting} to a device it has")


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity: a container's or `taskset`'s share, not the host's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_gpus_for_processes(processes: int, device: str) -> None:
    """A SolrlError naming `train.processes` when this machine sees fewer GPUs than the update's `processes` ranks on
    it need (local rank r runs on GPU r of its machine), or, on the CPU, has fewer cores than ranks."""
    if processes <= 1:
        return
    if not str(device).startswith("cuda"):
        cores = cpu_cores()
        if processes > cores:  # each rank a whole copy of the model, all on these cores
            raise SolrlError(f"train.processes is {processes} (update processes on this machine's CPU, each with a "
                             f"copy of the model), but it has {cores} CPU core{'' if cores == 1 else 's'} for this "
                             f"process; set train.processes to {cores} or less")
        return
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if processes <= count:
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = f"{'no' if count == 0 else count} GPU{'' if count == 1 else 's'}" + (
        f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
    fix = f"set train.processes to {count} or less" if count else "run the update on a machine with GPUs"
    raise SolrlError(f"train.processes is {processes} (one GPU per update process, on each training machine), but "
                     f"this machine sees {seen}; {fix}")


def check_update_devices(cfg) -> None:
    """What the update needs of this machine: `model.device`, and a GPU for each of its `train.processes` ranks."""
    check_present(cfg.model.device, "model.device")
    if (not str(cfg.model.device).startswith("cuda") and update_on_device_workers(cfg)
            and cfg.orchestration.devices != "auto"):
        return  # CPU ranks that are the listed device workers' own processes (check_update_ranks counts them)
    check_gpus_for_processes(cfg.train.processes, cfg.model.device)


def update_on_device_workers(cfg) -> bool:
    """Whether the update's ranks run on the run's device workers (tasks/dask_shards.py): a local cluster of several
    devices, or an update of several ranks, on one training machine; otherwise (ranks that span machines, a Dask
    cluster this run did not start) torchrun starts them. A one-machine update of several ranks thus never starts
    beside a model its flow process holds: that process holds none."""
    return (cfg.orchestration.dask_address is None and cfg.train.nodes == 1
            and (len(resolve_devices(cfg)) > 1 or cfg.train.processes > 1))


def check_update_ranks(cfg) -> None:
    """A SolrlError when the update has more ranks (`train.processes`) than the device workers that run them."""
    devices = resolve_devices(cfg)
    if update_on_device_workers(cfg) and cfg.train.processes > len(devices):
        raise SolrlError(f"train.processes is {cfg.train.processes}, but the update's ranks run on the {len(devices)} "
                         f"device workers (orchestration.devices: {', '.join(devices)}); set train.processes to "
                         f"{len(devices)} or less")


def check_devices(cfg, update: bool = True) -> None:
    """`check_present` for `model.device` and, without a Dask cluster of its own, `orchestration.devices`; with
    `update` (every command that may run the update), also a GPU for each update process (`check_update_devices`)
    and a device worker for each of its ranks (`check_update_ranks`)."""
    if update:
        check_update_devices(cfg)
    else:
        check_present(cfg.model.device, "model.device")
    if cfg.orchestration.dask_address is None and cfg.orchestration.devices != "auto":
        for device in cfg.orchestration.devices:
            check_present(device, "orchestration.devices")
    if update:
        check_update_ranks(cfg)


def resolve_devices(cfg) -> list[str]:
    """The devices of `cfg.orchestration.devices`: the list as given, or for `auto` every visible CUDA device when
    `model.device` is a CUDA device and CUDA is available, else `model.device` once per update rank of a one-machine
    run (`train.processes`: each rank a device worker that keeps its model, as a GPU's does), else once."""
    devices = cfg.orchestration.devices
    if devices != "auto":
        return list(devices)
    if cfg.model.device != "cpu":  # (importing torch takes seconds)
        import torch

        if torch.device(cfg.model.device).type == "cuda" and torch.cuda.is_available():
            return [f"cuda:{k}" for k in range(torch.cuda.device_count())]
    local_ranks = cfg.orchestration.dask_address is None and cfg.train.nodes == 1
    return [cfg.model.device] * (cfg.train.processes if local_ranks else 1)


def splits_over_devices(cfg) -> bool:
    """Whether the run's model work goes to device worker processes (several devices, or a Dask cluster of its
    own) rather than running in the process that orchestrates it."""
    return cfg.orchestration.dask_address is not None or len(resolve_devices(cfg)) > 1


def worker_env(device: str) -> dict[str, str]:
    """The environment of the worker process pinned to `device` (`cpu` or `cuda:k`, k counted among the GPUs this
    process sees: under CUDA_VISIBLE_DEVICES=4,5 `cuda:1` is GPU 5)."""
    if device == "cpu":
        return {"CUDA_VISIBLE_DEVICES": "", LABEL_ENV: "cpu"}
    index = int(device.split(":")[1])
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if index >= len(ids):
            raise SolrlError(f"orchestration.devices: {device} is not visible here (CUDA_VISIBLE_DEVICES={visible})")
        gpu = ids[index]
    else:
        gpu = str(index)
    return {"CUDA_VISIBLE_DEVICES": gpu, LABEL_ENV: f"cuda:{gpu}"}


def pinned_device() -> tuple[str, str]:
    """(torch device, name for the manifests) of this worker process: its one GPU, or the CPU when it sees none.

    A worker that sees several GPUs is refused: its shards would all land on the first one."""
    import torch

    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        if count > 1:
            raise SolrlError(f"the worker process {os.getpid()} on {socket.gethostname()} sees {count} GPUs; start "
                             "one Dask worker per GPU with CUDA_VISIBLE_DEVICES=k (see docs/operations.md)")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip() or "0"
        return "cuda", os.environ.get(LABEL_ENV) or f"cuda:{visible}"
    return "cpu", os.environ.get(LABEL_ENV) or "cpu"


def local_name(device: str) -> str:
    """How a process that sees every listed device names `device` for torch (`cuda:0` is `cuda`, which is also what
    a pinned worker calls its GPU: the text cache and reward fingerprints then agree)."""
    return "cuda" if device == "cuda:0" else device


def placed_config(cfg, device: str):
    """`cfg` with the model and every reward it scores with on `device` (a torch device of this process)."""
    rewards = set(cfg.rewards) | set(cfg.evaluation_rewards())
    models = {name: dict(spec or {}) for name, spec in cfg.reward_models.items()}
    for name in sorted(rewards):
        spec = models.get(name) or {}
        if spec.get("device", "cpu") != device:
            models[name] = {**spec, "device": device}
    if cfg.model.device == device and models == cfg.reward_models:
        return cfg
    return cfg.model_copy(update={"model": cfg.model.model_copy(update={"device": device}), "reward_models": models})
