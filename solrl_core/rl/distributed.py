"""Data-parallel training of the LoRA policy with torch.distributed.

Each process (rank) computes the loss of its own shard of the iteration's (sample, time) pairs, weighting every
micro-batch by its share of *all* pairs, so the gradients of the shards add up to exactly the gradient one process
computes over all pairs (the DiffusionNFT loss is a mean over pairs). One all-reduce (sum) of the LoRA gradients
before the optimizer step then gives every rank the same gradient, hence the same optimizer step, θ_old update and
EMA; rank 0 writes the checkpoint.

An explicit all-reduce of the adapter gradients is used rather than wrapping the transformer in
DistributedDataParallel: the update runs three forward passes per micro-batch through the same module with
different adapters (θ, θ_old, reference), ranks may hold different numbers of micro-batches, and a backbone adapter
calls the transformer directly (attributes such as `.config`), none of which DDP's wrapper allows without padding
or `Join`. For LoRA this is the same communication DDP does (a sum of a few small gradient tensors per step).

`launch_command` builds the torchrun (`torch.distributed.run`) command of one machine. On one machine
(`local_rendezvous`) the rendezvous and the process group use file stores, so no TCP store listens on any address,
and gloo/NCCL are kept on the loopback interface: nothing is reachable from outside the machine. Across machines
(`nodes_rendezvous`) it is torchrun's own multi-node setup: a c10d rendezvous at HOST:PORT (the machine whose
address is HOST hosts its TCP store; torchrun numbers the nodes as they join), and every rank joins the process group
from torchrun's environment (env://: MASTER_ADDR/MASTER_PORT of the node that got rank 0, RANK, WORLD_SIZE).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import torch

from solrl_core.errors import SolrlError
from solrl_core.placement import check_gpus_for_processes


class GradientSync:
    """One process: the whole set of pairs is this rank's shard and nothing is exchanged."""

    rank = 0
    world_size = 1

    @property
    def is_writer(self) -> bool:
        """Whether this rank writes the stage's artifacts (rank 0)."""
        return self.rank == 0

    def shard_range(self, n: int) -> tuple[int, int]:
        """[start, stop) of this rank's contiguous block of n rows: the first n % world_size blocks have one row
        more (as torch.tensor_split)."""
        if self.world_size > 1 and n < self.world_size:
            raise SolrlError(
                f"the update's {self.world_size} processes (train.processes x train.nodes) exceed its {n} training "
                "pairs; use fewer processes"
            )
        size, extra = divmod(n, self.world_size)
        start = self.rank * size + min(self.rank, extra)
        return start, start + size + (self.rank < extra)

    def shard(self, rows: torch.Tensor) -> torch.Tensor:
        """This rank's contiguous block of `rows` (blocks differ in length by at most one)."""
        start, stop = self.shard_range(len(rows))
        return rows[start:stop]

    def all_reduce_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Replace each parameter's gradient by its sum over ranks."""

    def all_reduce_totals(self, totals: dict[str, float]) -> dict[str, float]:
        """Sum per-rank (already weighted) loss terms over ranks."""
        return totals

    def all_reduce_max(self, value: int) -> int:
        """The largest `value` of any rank."""
        return value

    def barrier(self) -> None:
        """Wait for every rank."""


class ProcessGroupSync(GradientSync):
    """Many processes in the default torch.distributed process group."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def all_reduce_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self._dist.all_reduce(flat, op=self._dist.ReduceOp.SUM)
        offset = 0
        for p, g in zip(params, grads):
            p.grad = flat[offset : offset + g.numel()].view_as(g).clone()
            offset += g.numel()

    def all_reduce_max(self, value: int) -> int:
        device = "cuda" if self._dist.get_backend() == "nccl" else "cpu"
        values = torch.tensor([value], dtype=torch.int64, device=device)
        self._dist.all_reduce(values, op=self._dist.ReduceOp.MAX)
        return int(values.item())

    def barrier(self) -> None:
        self._dist.barrier()

    def all_reduce_totals(self, totals: dict[str, float]) -> dict[str, float]:
        keys = sorted(totals)
        device = "cuda" if self._dist.get_backend() == "nccl" else "cpu"
        values = torch.tensor([totals[k] for k in keys], dtype=torch.float64, device=device)
        self._dist.all_reduce(values, op=self._dist.ReduceOp.SUM)
        return dict(zip(keys, values.cpu().tolist()))


def check_setup(backend: str, device: str, processes: int = 1) -> None:
    """Refuse settings the machine cannot run (one line naming the key to change); `processes`: the update's ranks
    on this machine (`train.processes`), each of which needs a GPU of its own on CUDA."""
    if backend == "nccl" and not (device.startswith("cuda") and torch.cuda.is_available()):
        raise SolrlError("train.dist_backend: nccl needs CUDA GPUs (model.device cuda); use gloo on a CPU")
    if device.startswith("cuda:"):
        raise SolrlError(f"model.device: with several update processes use 'cuda', not '{device}' (local rank r "
                         "runs on GPU r of its machine)")
    check_gpus_for_processes(processes, device)


GROUP_TIMEOUT = timedelta(minutes=10)  # a rank that never comes (or a peer that failed) ends the wait with an error


@contextmanager
def process_group(backend: str, store_file: str | Path | None, device: str, rank: int | None = None,
                  world: int | None = None):
    """Join a process group: through the file `store_file` (one machine) or, when None, torchrun's env:// (several
    machines). Rank and size are `rank` and `world` when given (the device workers of a run, each pinned to its one
    GPU), else torchrun's (its env). On CUDA the current device is the local rank's GPU of its machine (GPU 0 of a
    pinned worker), so `cuda` means that GPU inside the rank. On leaving without an error every rank waits for all
    others (a barrier), so no rank ends before the writer rank, wherever it runs, has saved."""
    import torch.distributed as dist

    pinned = rank is not None
    rank = rank if pinned else int(os.environ["RANK"])
    world = world if pinned else int(os.environ["WORLD_SIZE"])
    if device.startswith("cuda"):
        torch.cuda.set_device(0 if pinned else int(os.environ.get("LOCAL_RANK", 0)))
    if store_file is None:
        dist.init_process_group(backend, timeout=GROUP_TIMEOUT)
    else:
        dist.init_process_group(backend, init_method=Path(store_file).resolve().as_uri(), rank=rank, world_size=world,
                                timeout=GROUP_TIMEOUT)
    try:
        yield ProcessGroupSync()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def local_rendezvous(store_file: str | Path) -> list[str]:
    """torchrun options for one machine: a rendezvous through a file store (no TCP store listens)."""
    return ["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", str(Path(store_file).resolve()),
            "--rdzv-conf", "store_type=file"]


def nodes_rendezvous(nodes: int, endpoint: str, rdzv_id: str) -> list[str]:
    """torchrun options for one of `nodes` machines that meet at `endpoint` (HOST:PORT) under the id `rdzv_id`."""
    return ["--nnodes", str(nodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id]


def launch_command(module: str, args: Sequence[str], processes: int, rendezvous: Sequence[str]) -> list[str]:
    """torchrun on this machine: `processes` copies of `python -m module args`, meeting by `rendezvous` (the options
    `local_rendezvous` or `nodes_rendezvous` give)."""
    return [sys.executable, "-m", "torch.distributed.run", *rendezvous, "--nproc-per-node", str(processes),
            "--module", module, *args]


def launch_env(processes: int, nodes: int = 1, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the launch: the CPU cores split between this machine's processes (unless OMP_NUM_THREADS is
    set); on one machine also no shared TCP store in the agent and collectives on the loopback interface."""
    env = dict(os.environ if base is None else base)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // processes)))
    if nodes == 1:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        env.setdefault("NCCL_SOCKET_IFNAME", "lo")
    return env
