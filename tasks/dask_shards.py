"""Work split over devices (solrl_core/stages/shards.py) as Prefect tasks on a Dask cluster, one worker per device.

The stage's task runs a `solrl-shards` subflow with prefect-dask's DaskTaskRunner connected to a Dask scheduler:

* `orchestration.dask_address` set: that running cluster. Its workers are started by hand, one per GPU, each with
  CUDA_VISIBLE_DEVICES naming its GPU and `--resources device=1` (see docs/operations.md); a shard runs on each of them.
* otherwise: a temporary `distributed.SpecCluster` on 127.0.0.1 with one single-threaded Nanny per entry of
  `orchestration.devices`, its worker process pinned to that device by its environment
  (solrl_core/placement.py: worker_env) before torch starts.

Every task needs one `device` resource, and every worker has one: a worker runs one task at a time. One task
prepares the work on a worker (so the stage's own process never loads the model), then one task per shard runs its
rows. The update's ranks run as one task per rank, all at once (`solrl-ranks`), on the same workers. Each task rebuilds its stage context from the run directory. A failed task is retried once, and a failed
subflow fails the stage task, which Prefect retries: a sampling shard resumes at its batches not done yet.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import dask
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from solrl_core.models.backbones.cache import refuse_model_loads
from solrl_core.errors import SolrlError
from solrl_core.placement import (
    RESOURCE,
    check_update_ranks,
    pinned_device,
    resolve_devices,
    update_on_device_workers,
    worker_env,
)
from solrl_core.quiet import quiet_libraries
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import load_run_config
from solrl_core.stages.context import StageContext
from solrl_core.stages.shards import Shard, prepare, run_rank, run_shard
from solrl_core.run.storage import location
from solrl.tasks.retry import retry_unless_user_error

_TASK = {"retries": 1, "retry_delay_seconds": 1, "retry_condition_fn": retry_unless_user_error,
         "cache_policy": NO_CACHE, "persist_result": False}
CONNECT_TIMEOUT = 30  # seconds to reach a scheduler named by orchestration.dask_address

# The local cluster's worker processes preload this module first (`local_cluster`), and their output reaches the
# user's terminal: keep library chatter off it as the CLI does, before the stage's module loads those libraries.
quiet_libraries()


def _context(run_dir: str, iteration: int) -> StageContext:
    run = RunDir(run_dir)
    return StageContext(run, load_run_config(run), iteration, progress=False)


def _name(ref: str) -> str:
    return ref.rpartition(".")[2].replace(":", "-")  # "solrl_core.stages.explore:sampling" -> explore-sampling


@task(name="prepare-shards", task_run_name="{what}-it{iteration}-prepare", **_TASK)
def prepare_task(run_dir: str, iteration: int, ref: str, what: str) -> None:
    prepare(_context(run_dir, iteration), ref, pinned_device()[0])


@task(name="shard", task_run_name="{what}-it{iteration}-shard{index}", **_TASK)
def shard_task(run_dir: str, iteration: int, ref: str, what: str, index: int, first_batch: int,
               stop_batch: int) -> dict:
    return run_shard(_context(run_dir, iteration), ref, Shard(index, first_batch, stop_batch), *pinned_device())


@task(name="rank", task_run_name="{what}-it{iteration}-rank{rank}", **{**_TASK, "retries": 0})
def rank_task(run_dir: str, iteration: int, ref: str, what: str, rank: int, world: int, store: str,
              threads: int | None = None) -> dict:
    """One rank of collective work (not retried alone: its peers would wait for it; the stage task is retried)."""
    return run_rank(_context(run_dir, iteration), ref, rank, world, store, *pinned_device(), threads=threads)


@flow(name="solrl-ranks", flow_run_name="{what}-it{iteration}-ranks")
def ranks_flow(run_dir: str, iteration: int, ref: str, what: str, world: int, store: str,
               threads: int | None = None) -> list[dict]:
    """Every rank at once, each on a worker with a free `device` (they meet through the file `store`), each with
    `threads` torch intra-op threads."""
    with dask.annotate(resources={RESOURCE: 1}):
        futures = [rank_task.submit(run_dir, iteration, ref, what, rank, world, store, threads)
                   for rank in range(world)]
    return [future.result() for future in futures]


@flow(name="solrl-shards", flow_run_name="{what}-it{iteration}-shards")
def shards_flow(run_dir: str, iteration: int, ref: str, what: str, shards: list[dict]) -> list[dict]:
    """Prepare the work, then run every shard at once, each on a worker with a free `device`."""
    with dask.annotate(resources={RESOURCE: 1}):
        prepare_task.submit(run_dir, iteration, ref, what).result()
        futures = [shard_task.submit(run_dir, iteration, ref, what, **shard) for shard in shards]
    return [future.result() for future in futures]


def rank_threads(world: int) -> int:
    """The torch intra-op threads of each of `world` ranks on this machine's device workers: this process's own
    count shared between them, so that one rank computes as this process would (docs/config.md,
    orchestration.devices)."""
    import torch

    return max(1, torch.get_num_threads() // world)


def cluster_devices(address: str) -> int:
    """How many workers of the Dask cluster at `address` offer the `device` resource."""
    from distributed import Client

    try:
        with Client(address, timeout=CONNECT_TIMEOUT) as client:
            workers = client.scheduler_info(n_workers=-1)["workers"].values()
    except OSError as exc:
        raise SolrlError(f"orchestration.dask_address: no Dask scheduler answers at {address} ({exc})") from None
    count = sum(int(w.get("resources", {}).get(RESOURCE, 0) >= 1) for w in workers)
    if not count:
        raise SolrlError(f"the Dask cluster at {address} has no worker with the '{RESOURCE}' resource: start one per "
                         f"GPU with `dask worker {address} --nthreads 1 --resources {RESOURCE}=1`")
    return count


def worker_memory_limit(devices: list[str]) -> int:
    """Host memory each device worker may use before its Nanny restarts it: the machine's memory shared by the
    device workers. Dask's default is the memory divided by the CPU cores (about 9 GiB a worker on a 2 TiB,
    224-thread node), and its Nanny kills a worker at 95 % of that, while loading a FLUX.1-sized model holds about
    31 GB of host memory for a while: the workers died in `from_pretrained` (KilledWorker). One worker per device,
    so a device's share of the host is the right bound; it still restarts a worker that leaks."""
    from distributed.system import MEMORY_LIMIT

    return int(MEMORY_LIMIT // max(len(devices), 1))


def worker_specs(devices: list[str], preload: list[str]) -> dict:
    """SpecCluster worker specs: one single-threaded Nanny per device, its process pinned by its environment."""
    from distributed import Nanny

    limit = worker_memory_limit(devices)
    return {f"device-{k}": {"cls": Nanny, "options": {
        "nthreads": 1, "host": "127.0.0.1", "env": worker_env(device), "resources": {RESOURCE: 1},
        "memory_limit": limit, "preload": preload, "dashboard": False, "silence_logs": logging.ERROR}}
        for k, device in enumerate(devices)}


@contextlib.contextmanager
def local_cluster(devices: list[str], preload: list[str]) -> Iterator[str]:
    """A temporary Dask cluster on 127.0.0.1 of one pinned worker per device; yields its scheduler's address."""
    from distributed import Scheduler, SpecCluster

    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "port": 0, "dashboard_address": "127.0.0.1:0"}}
    with SpecCluster(workers=worker_specs(devices, preload), scheduler=scheduler, silence_logs=40) as cluster:
        yield cluster.scheduler_address


def _task_runner(address: str):
    from prefect_dask import DaskTaskRunner  # imports distributed: only when work is split

    return DaskTaskRunner(address=address)


class DaskShards:
    """The ShardRunner of the Prefect stage tasks. A local cluster starts at the first split work and serves every
    later one until `close`: the training flow holds one for the whole run, so each device's worker loads the model
    once and keeps it, for every stage of every iteration and the evaluations. The update's ranks run on the same
    workers (`ranks`) unless its processes span machines (`train.nodes` > 1, torchrun) or the cluster is one this
    process did not start (`orchestration.dask_address`: its workers may be anywhere; torchrun too)."""

    def __init__(self):
        self._stack = contextlib.ExitStack()
        self._local: dict[tuple[str, ...], str] = {}  # devices -> scheduler address

    def workers(self, cfg) -> int | None:
        if cfg.orchestration.dask_address:
            return cluster_devices(cfg.orchestration.dask_address)
        count = len(resolve_devices(cfg))
        return None if count == 1 else count

    def __call__(self, ctx: StageContext, ref: str, shards: list[Shard]) -> list[dict]:
        runner = _task_runner(self._address(ctx.cfg, ref))
        return shards_flow.with_options(task_runner=runner)(location(ctx.run.root), ctx.iteration, ref, _name(ref),
                                                            [asdict(shard) for shard in shards])

    @contextlib.contextmanager
    def models_on_workers(self, cfg) -> Iterator[None]:
        """Inside, this process must load no model when the run's model work goes to device workers (a load here
        would be a second copy of the model on GPU 0, beside worker 0's)."""
        if self.workers(cfg) is None:
            yield
            return
        with refuse_model_loads("the flow process of a run split over devices"):
            yield

    def hosts_update(self, cfg) -> bool:
        """Whether the update's ranks run on this runner's device workers (else they start by torchrun, and the
        workers must free their devices first)."""
        return update_on_device_workers(cfg)

    def ranks(self, ctx: StageContext, ref: str, world: int) -> list[dict] | None:
        if not self.hosts_update(ctx.cfg):
            return None
        check_update_ranks(ctx.cfg)
        runner = _task_runner(self._address(ctx.cfg, ref))
        with tempfile.TemporaryDirectory(prefix="solrl-ranks-") as tmp:  # the workers are on this machine
            return ranks_flow.with_options(task_runner=runner)(location(ctx.run.root), ctx.iteration, ref, _name(ref),
                                                               world, str(Path(tmp) / "group.store"),
                                                               rank_threads(world))

    def _address(self, cfg, ref: str) -> str:
        if cfg.orchestration.dask_address:
            return cfg.orchestration.dask_address
        devices = tuple(resolve_devices(cfg))
        if devices not in self._local:  # every worker imports the work's module while the others start
            preload = [__name__, ref.split(":")[0]]
            self._local[devices] = self._stack.enter_context(local_cluster(list(devices), preload))
        return self._local[devices]

    def close(self) -> None:
        """Stop the local clusters started so far (their workers free their devices); a later call starts anew."""
        self._stack.close()
        self._stack, self._local = contextlib.ExitStack(), {}


@contextlib.contextmanager
def dask_shards() -> Iterator[DaskShards]:
    """Run the split work of the stages started inside this block on Dask (one worker process per device); yields
    the runner (`close` it to free the devices early). Inside an outer block the outer one's cluster serves: a flow
    that runs several stages in one process holds one cluster for all of them (the iteration flow does, up to the
    update); a stage task alone starts its own, and its workers free their devices when it ends."""
    from solrl_core.stages.shards import current_shard_runner, use_shard_runner

    outer = current_shard_runner()
    if isinstance(outer, DaskShards):
        yield outer
        return
    runner = DaskShards()
    try:
        with use_shard_runner(runner):
            yield runner
    finally:
        runner.close()
