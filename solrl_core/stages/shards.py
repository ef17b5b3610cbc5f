"""Multi-worker sampling: a stage's pool split into shards that several processes fill at the same time.

A shard is a contiguous range of whole sampling batches of the pool, so every batch is formed exactly as in a
single-worker run (the NVFP4 activation scales are per batch) and the pool is identical bit for bit. Each shard
writes only its own batches and their completion markers (solrl_core/pool.py), and resumes at its first batch not
done. Everything a shard needs comes from the run directory, so any process can run any shard:

1. `prepare_shards`: create the pool and put its prompts in the text cache (before any shard starts);
2. `run_shard` for every shard, in any order, at the same time;
3. `sample_sharded` (the stage's own process) then checks every batch is done and records the `committed` count.

Who runs steps 1-2 is the orchestrator's choice, given with `use_shard_runner` (the Prefect stage tasks run them on
a Dask cluster: tasks/shards.py); by default they run one after another in this process. Scoring while sampling
(`score.overlap`) is off for sharded stages: the score stage scores the whole pool.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

import torch
import zarr

from solrl_core.errors import SolrlError
from solrl_core.pool import CandidateWriter, batch_count
from solrl_core.stages.context import StageContext, load_backbone
from solrl_core.stages.sampling import open_pool, sample_into_pool
from solrl_core.storage import zarr_store

# stage -> module whose SHARDING describes how the stage samples its pool
SHARDED_STAGES = {"explore": "solrl_core.stages.explore", "regenerate": "solrl_core.stages.regenerate"}


@dataclass(frozen=True)
class Shard:
    index: int
    first_batch: int
    stop_batch: int  # exclusive

    @property
    def batches(self) -> range:
        return range(self.first_batch, self.stop_batch)


def plan_shards(n_rows: int, batch_size: int, workers: int) -> list[Shard]:
    """At most `workers` shards of contiguous whole batches covering the pool, sizes differing by at most a batch."""
    if batch_size < 1 or workers < 1:
        raise ValueError(f"batch_size and workers must be >= 1 (got {batch_size}, {workers})")
    n = batch_count(n_rows, batch_size)
    count = max(min(workers, n), 1)
    base, extra = divmod(n, count)
    shards, first = [], 0
    for i in range(count):
        stop = first + base + (1 if i < extra else 0)
        shards.append(Shard(i, first, stop))
        first = stop
    return shards


@dataclass(frozen=True)
class ShardedSampling:
    """How a stage samples its pool, in pieces any process can compute from the run directory alone.

    pool(ctx): `sample_into_pool`'s arguments other than the model, progress and context (path, prompts,
    prompt_index, seeds, steps, batch_size, keep_latents, attrs, desc, optionally extra_columns).
    model(ctx, backbone): the transformer that samples.
    """

    pool: Callable[[StageContext], dict]
    model: Callable[[StageContext, object], torch.nn.Module]


def sharding(stage: str) -> ShardedSampling:
    if stage not in SHARDED_STAGES:
        raise SolrlError(f"stage '{stage}' cannot be split across workers (only {', '.join(SHARDED_STAGES)})")
    return importlib.import_module(SHARDED_STAGES[stage]).SHARDING


def prepare_shards(ctx: StageContext, stage: str) -> None:
    """Create the stage's pool (or keep the one a previous attempt left) before its shards write into it."""
    args = sharding(stage).pool(ctx)
    open_pool(args["path"], load_backbone(ctx.cfg), args["prompts"], len(args["seeds"]), args["steps"],
              args["batch_size"], args["keep_latents"], args["attrs"], args.get("extra_columns"), ctx)


def run_shard(ctx: StageContext, stage: str, shard: Shard) -> dict:
    """Sample the batches of `shard` that are not done yet into the stage's pool; return what it did."""
    spec = sharding(stage)
    args = spec.pool(ctx)
    backbone = load_backbone(ctx.cfg)
    args["desc"] = f"{args['desc']} shard {shard.index}"
    try:
        todo = CandidateWriter(zarr.open_group(zarr_store(args["path"]), mode="r")).pending(shard.batches)
    except (KeyError, ValueError, OSError, zarr.errors.BaseZarrError):
        raise SolrlError(f"the pool {args['path']} does not exist yet: prepare_shards runs before the shards") from None
    writer = sample_into_pool(backbone=backbone, transformer=spec.model(ctx, backbone), progress=ctx.progress,
                              ctx=ctx, batches=shard.batches, **args)
    left = writer.pending(shard.batches)
    return {"shard": shard.index, "batches": [shard.first_batch, shard.stop_batch], "pid": os.getpid(),
            "sampled": len(todo) - len(left), "left": len(left)}


ShardRunner = Callable[[StageContext, str, list[Shard]], list[dict]]  # -> each shard's `run_shard` report


def run_in_process(ctx: StageContext, stage: str, shards: list[Shard]) -> list[dict]:
    """The default runner: prepare, then every shard one after another, here."""
    prepare_shards(ctx, stage)
    return [run_shard(ctx, stage, shard) for shard in shards]


_RUNNER: ContextVar[ShardRunner] = ContextVar("solrl_shard_runner", default=run_in_process)


@contextlib.contextmanager
def use_shard_runner(runner: ShardRunner) -> Iterator[None]:
    """Run the shards of sharded stages started inside this block with `runner(ctx, stage, shards)`."""
    token = _RUNNER.set(runner)
    try:
        yield
    finally:
        _RUNNER.reset(token)


def workers_for(ctx: StageContext, stage: str) -> int:
    return int(ctx.cfg.orchestration.workers.get(stage, 1))


def sample_sharded(ctx: StageContext, stage: str, workers: int) -> tuple[CandidateWriter, list[dict]]:
    """Fill the stage's pool in `workers` shards with the current runner; return the complete pool's writer and
    the shards' reports (`run_shard`)."""
    args = sharding(stage).pool(ctx)
    shards = plan_shards(len(args["seeds"]), args["batch_size"], workers)
    writer = _complete_pool(args)
    reports = [] if writer is not None else _RUNNER.get()(ctx, stage, shards)
    writer = CandidateWriter(zarr.open_group(zarr_store(args["path"]), mode="r+"))
    if writer.sync_committed() < writer.n_rows:
        left = writer.pending()
        raise SolrlError(f"{stage} of iteration {ctx.iteration}: {len(left)} of {writer.n_batches} batches are not "
                         f"done after its {len(shards)} shards ran (first: batch {left[0]}); run the stage again "
                         "to finish them")
    return writer, reports


def _complete_pool(args: dict) -> CandidateWriter | None:
    """The stage's pool when an earlier attempt already finished every batch of it (nothing to start), else None."""
    try:
        writer = CandidateWriter(zarr.open_group(zarr_store(args["path"]), mode="r+"))
    except (KeyError, ValueError, OSError, zarr.errors.BaseZarrError):
        return None
    same = writer.n_rows == len(args["seeds"]) and writer.batch_size == args["batch_size"]
    return writer if same and not writer.pending() else None
