"""Work split over devices: a stage's rows in shards of whole batches, one shard per device, run at the same time.

The splittable work of a stage is a function of the stage's module, `(StageContext) -> work`, that builds the work
from the run directory alone, so any process can build it and run any shard of it: it travels to other processes
by its name, `ref` = "module:function" (`work_ref`), and `load(ref)` finds it there. Two kinds exist: a pool to
sample (`PoolSampling`, solrl_core/stages/sampling.py) and a pool to score (`PoolScoring`,
solrl_core/stages/pool_scoring.py). Each has

    n_rows, unit          rows, and the rows of an indivisible piece (a sampling batch; the lcm of the rewards'
                          batch sizes), so every batch is formed exactly as in a one-device run: the same results;
    prepare(ctx)          before any shard starts (sampling: create the pool and cache its prompts' conditioning);
    run_shard(ctx, rows)  in a shard's process: (what it did, the result it hands back);
    finished()            nothing left to run (a pool an earlier attempt completed);
    collect(ctx, reports) in the stage's process: the stage's result from the shards' results;
    desc, bar_unit        the progress bar's label and unit, as the work shows it on one device;
    rows_done()           rows the shards have finished so far, read from what they wrote (None: not known until
                          every shard is done); the stage's process polls it for its one progress bar.

Model work that does not split (the quantize stage's report, the initial adapters) is split work of one piece
(`OnePiece`), so that it too runs where the models are. Collective work, the update's data-parallel ranks, runs on
`world` device workers at once (`run_ranks`), which meet in a torch.distributed group: each device's process then
keeps its one copy of the model for sampling, scoring and training alike.

Who runs the shards is the orchestrator's choice, given with `use_shard_runner` (the Prefect stage tasks run them on
a Dask cluster of one process per device: tasks/dask_shards.py). The default runs them here, one after another, each on
its device. With one device (and no Dask cluster named) a stage runs in its own process as it always did.
Every run records, per shard, its device, host, process, seconds and how many models that process has loaded so far
(`records`) in the stage's manifest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from solrl_core.placement import local_name, placed_config, resolve_devices
from solrl_core.models.backbones.cache import load_backbone, model_loads
from solrl_core.stages.context import StageContext
from solrl_core.stages.pool_scoring import scoring_while_sampling
from solrl_core.torch_threads import intra_op_threads


Work = Callable[..., Any] | str  # a work function of a stage module, or its ref


def work_ref(work: Work) -> str:
    """The name "module:function" the work function `work` travels under to another process."""
    return work if isinstance(work, str) else f"{work.__module__}:{work.__qualname__}"


def load(ref: str) -> Callable[..., Any]:
    """The work function a "module:function" ref names (imported here when it is not yet)."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Shard:
    index: int
    first_batch: int  # in units of the work's `unit` rows
    stop_batch: int  # exclusive

    @property
    def batches(self) -> range:
        return range(self.first_batch, self.stop_batch)

    def rows(self, unit: int, n_rows: int) -> range:
        return range(self.first_batch * unit, min(self.stop_batch * unit, n_rows))


@dataclass(frozen=True)
class OnePiece:
    """Model work that does not split (the quantize stage's report, say): one piece, run in a device's process (a
    device worker when the stages split, the stage's own process otherwise), whose result comes back."""

    run: Any  # (StageContext) -> result
    desc: str
    n_rows: int = 1
    unit: int = 1
    bar_unit: str = "piece"

    def prepare(self, ctx: StageContext) -> None:
        return None

    def rows_done(self) -> None:
        return None

    def finished(self) -> bool:
        return False

    def whole(self, ctx: StageContext):
        return self.run(ctx)

    def run_shard(self, ctx: StageContext, shard: Shard) -> tuple[dict, Any]:
        return {}, self.run(ctx)

    def collect(self, ctx: StageContext, reports: list[dict]):
        return reports[0]["result"]


def plan_shards(n_rows: int, batch_size: int, workers: int) -> list[Shard]:
    """At most `workers` shards of contiguous whole batches covering the pool, sizes differing by at most a batch."""
    if batch_size < 1 or workers < 1:
        raise ValueError(f"batch_size and workers must be >= 1 (got {batch_size}, {workers})")
    n = -(-n_rows // batch_size)
    count = max(min(workers, n), 1)
    base, extra = divmod(n, count)
    shards, first = [], 0
    for i in range(count):
        stop = first + base + (1 if i < extra else 0)
        shards.append(Shard(i, first, stop))
        first = stop
    return shards


class SplitWork(Protocol):
    n_rows: int
    unit: int
    desc: str
    bar_unit: str

    def prepare(self, ctx: StageContext) -> None: ...
    def run_shard(self, ctx: StageContext, shard: Shard) -> tuple[dict, Any]: ...
    def finished(self) -> bool: ...
    def collect(self, ctx: StageContext, reports: list[dict]) -> Any: ...
    def rows_done(self) -> int | None: ...


def placed(ctx: StageContext, device: str) -> StageContext:
    """The context of a process that runs on `device` (a torch device of that process)."""
    cfg = placed_config(ctx.cfg, device)
    return ctx if cfg is ctx.cfg else dataclasses.replace(ctx, cfg=cfg)


def prepare(ctx: StageContext, ref: str, device: str) -> None:
    """Step 1, in any process: what the work needs before its shards start."""
    ctx = placed(ctx, device)
    load(ref)(ctx).prepare(ctx)


def process_record(index: int, device: str, started: float, **more) -> dict:
    """Where a piece of work ran, for the stage's manifest: its index (shard or rank), `more` (its rows, what it
    did), the device's name, host, process, seconds since `started` (a `time.perf_counter()`) and how many models
    that process has loaded so far."""
    return {"shard": index, **more, "device": device, "host": socket.gethostname(), "pid": os.getpid(),
            "seconds": round(time.perf_counter() - started, 3), "model_loads": model_loads()}


def run_shard(ctx: StageContext, ref: str, shard: Shard, device: str, label: str) -> dict:
    """Step 2, in the shard's process (on torch device `device`, named `label` in the manifest): run the shard;
    return its record with the result under "result"."""
    start = time.perf_counter()
    ctx = placed(ctx, device)
    work = load(ref)(ctx)
    did, result = work.run_shard(ctx, shard)
    rows = shard.rows(work.unit, work.n_rows)
    return {**process_record(shard.index, label, start, rows=[rows.start, rows.stop]), **did, "result": result}


def records(reports: list[dict]) -> list[dict]:
    """The shards' records for the manifest (their results left out)."""
    return [{k: v for k, v in report.items() if k != "result"} for report in reports]


class ShardRunner(Protocol):
    def workers(self, cfg) -> int | None:
        """Shards to plan for a run of `cfg`; None = no worker processes: one device, in the stage's process."""

    def __call__(self, ctx: StageContext, ref: str, shards: list[Shard]) -> list[dict]:
        """Prepare, then run every shard (`run_shard`); return their reports, in shard order."""

    def hosts_update(self, cfg) -> bool:
        """Whether the update's ranks run on this runner's device workers (`ranks`)."""

    def ranks(self, ctx: StageContext, ref: str, world: int) -> list[dict] | None:
        """Run the collective work `ref` on `world` of this runner's device workers at once (`run_rank`); return
        their records in rank order, or None when the runner has no workers that can host it (then it is started
        by other means)."""


def run_rank(ctx: StageContext, ref: str, rank: int, world: int, store: str, device: str, label: str,
             threads: int | None = None) -> dict:
    """In the process of one of `world` device workers that run the collective work `ref` together (the update's
    data-parallel ranks): `load(ref)(ctx, rank, world, store)`, the ranks meeting through the file store `store`;
    return the rank's record with its result under "result". `threads`: its torch intra-op threads (a Dask worker
    has one; the update's CPU reductions are split by thread, so one rank that runs with the orchestrating
    process's threads computes what that process would, bit for bit)."""
    start = time.perf_counter()
    ctx = placed(ctx, device)
    with intra_op_threads(threads):
        result = load(ref)(ctx, rank, world, store)
    return {**process_record(rank, label, start, threads=threads), "result": result}


class InProcess:
    """The default runner: every shard here, one after another, each on its device (no process is pinned)."""

    def workers(self, cfg) -> int | None:
        count = len(resolve_devices(cfg))
        return None if count == 1 else count

    def hosts_update(self, cfg) -> bool:
        return False  # no worker processes: collective work is started by other means (torchrun)

    def ranks(self, ctx: StageContext, ref: str, world: int) -> list[dict] | None:
        return None

    def __call__(self, ctx: StageContext, ref: str, shards: list[Shard]) -> list[dict]:
        devices = resolve_devices(ctx.cfg)
        prepare(ctx, ref, local_name(devices[0]))
        return [run_shard(ctx, ref, shard, local_name(device), device) for shard, device in zip(shards, devices)]


_RUNNER: ContextVar[ShardRunner] = ContextVar("solrl_shard_runner", default=InProcess())


@contextlib.contextmanager
def use_shard_runner(runner: ShardRunner) -> Iterator[None]:
    """Run the shards of the stages started inside this block with `runner`."""
    token = _RUNNER.set(runner)
    try:
        yield
    finally:
        _RUNNER.reset(token)


def current_shard_runner() -> ShardRunner:
    return _RUNNER.get()


def shard_workers(ctx: StageContext) -> int | None:
    """How many shards the current runner splits work into (None: one device, in this process)."""
    return _RUNNER.get().workers(ctx.cfg)


def on_the_one_device(ctx: StageContext) -> StageContext:
    """The context of a run of one device placed on it, as every stage of that run sees it (the same cached model)."""
    return placed(ctx, local_name(resolve_devices(ctx.cfg)[0]))


@contextlib.contextmanager
def one_device(ctx: StageContext, ref: str) -> Iterator[tuple[StageContext, Any, list[dict]]]:
    """The in-process path: (the context placed on the one device, the work, the one record, filled in when the
    block ends)."""
    device = resolve_devices(ctx.cfg)[0]
    ctx = on_the_one_device(ctx)
    work = load(ref)(ctx)
    record: list[dict] = []
    start = time.perf_counter()
    yield ctx, work, record
    record.append(process_record(0, device, start, rows=[0, work.n_rows]))


POLL_SECONDS = 1.0  # how often the stage's process reads the shards' progress


@contextlib.contextmanager
def split_progress(work: SplitWork, show: bool) -> Iterator[None]:
    """One progress bar in the stage's process for work whose shards run elsewhere (other processes draw nothing
    on this terminal): the rows done, polled from what the shards wrote (`work.rows_done()`)."""
    if not show:
        yield
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=work.n_rows, initial=work.rows_done() or 0, desc=work.desc, unit=work.bar_unit)
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_SECONDS):
            done = work.rows_done()
            if done is not None and done > bar.n:
                bar.update(done - bar.n)

    poller = threading.Thread(target=poll, name="solrl-split-progress", daemon=True)
    poller.start()
    try:
        yield
        bar.update(work.n_rows - bar.n)
    finally:
        stop.set()
        poller.join()
        bar.close()


def run_split(ctx: StageContext, ref: str, workers: int) -> tuple[Any, list[dict]]:
    """Split the work `ref` into `workers` shards, run them with the current runner and collect the result;
    return it with the shards' records (none when an earlier attempt had already finished the work). The shards
    draw no bars of their own: this process shows one for the whole work (`split_progress`)."""
    work = load(ref)(ctx)
    shards = plan_shards(work.n_rows, work.unit, workers)
    reports = []
    if not work.finished():
        with split_progress(work, ctx.progress):
            reports = _RUNNER.get()(dataclasses.replace(ctx, progress=False), ref, shards)
    return work.collect(ctx, reports), records(reports)


def run_ranks(ctx: StageContext, work: Work, world: int, desc: str) -> list[dict] | None:
    """The collective work `work` on `world` device workers of the current runner (their records, rank order), or
    None when it has none (one device, or a cluster whose workers it did not start). The ranks draw no bars: this
    process shows one, `desc`, for the whole work."""
    from tqdm.auto import tqdm

    ref = work_ref(work)
    runner = _RUNNER.get()
    if not runner.hosts_update(ctx.cfg):
        return None
    with tqdm(total=world, desc=desc, unit="rank", disable=not ctx.progress) as bar:
        done = runner.ranks(dataclasses.replace(ctx, progress=False), ref, world)
        bar.update(world)
    return done


def split_or_whole(ctx: StageContext, work: Work) -> tuple[Any, list[dict]]:
    """The result of the work `work` and its shards' records: split over the devices, or whole here on the one device
    (`work.whole(ctx)`)."""
    ref = work_ref(work)
    workers = shard_workers(ctx)
    if workers is not None:
        return run_split(ctx, ref, workers)
    with one_device(ctx, ref) as (placed_ctx, built, record):
        result = built.whole(placed_ctx)
    return result, record


def sample_pool(ctx: StageContext, work: Work, overlap: bool | None = None):
    """Fill the pool of the sampling work `work` (a `PoolSampling`); return its writer and the shards' records.

    Split over the devices, the pool is scored afterwards (by the score stage, split too); whole here on the one
    device, each batch is scored while the next samples when `score.overlap` (or `overlap`) says so."""
    ref = work_ref(work)
    workers = shard_workers(ctx)
    if workers is not None:
        job = load(ref)(ctx)
        with scoring_while_sampling(ctx, job.path, job.row_prompts, job.seeds, overlap=False):  # clears stale scores
            return run_split(ctx, ref, workers)
    with one_device(ctx, ref) as (placed_ctx, job, record):
        with scoring_while_sampling(placed_ctx, job.path, job.row_prompts, job.seeds, overlap=overlap) as on_commit:
            writer = job.sample(placed_ctx, load_backbone(placed_ctx.cfg), on_commit=on_commit)
    return writer, record
