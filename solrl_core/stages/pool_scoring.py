"""Rewards of a pool's rows, computed while the pool is sampled (overlap) or afterwards, with the same numbers.

Reward r with batch size b scores rows [k*b, (k+1)*b) of a pool (the last batch may be shorter), and only those
batches, whatever order the rows become available in. So scoring each committed batch on a background thread while
the next batch samples (`scoring_while_sampling`, on when `score.overlap`), scoring after a crash and a resume, and
scoring the whole pool in the score stage (`score_pool`) all give the same scores, bit for bit.

`ScoreStore` keeps the scores, and persists them next to the pool (`scores.zarr`) while it is being sampled: one
float64 column `reward_<name>` per reward and, in the group attributes, each reward's committed row count and its
fingerprint (name, files, batch size, device, dtype). Like the pool, rows past a committed count are scored again
after a crash; a column written under another fingerprint (the reward config changed) is scored again from row 0.
The score stages read the stored columns, score only the rows still missing, and write `rewards.zarr` as before.

One device or several, the same computation: a torch reward on the CPU scores with SCORING_THREADS intra-op threads
wherever it runs (`scoring_threads`). Its float32 convolutions and matrix products split their sums by the thread
count, so their rounding depends on it (one bit of float32 at the score's magnitude, e.g. 1.2e-7 between 1 and 2
threads), and the processes that score differ: the stage's own process (torch's default: the cores) scores while
sampling, a Dask device worker (started with OMP_NUM_THREADS=1) scores a shard.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr
from tqdm.auto import tqdm

from solrl_core.edit_sources import SOURCE_ARRAY
from solrl_core.errors import SolrlError
from solrl_core.run.pool import create_array
from solrl_core.rewards.base import Reward, torch_device
from solrl_core.rewards.registry import load_rewards, release_rewards, reward_batch_size, weighted_sum
from solrl_core.stages.context import StageContext
from solrl_core.run.storage import remove_tree, zarr_store
from solrl_core.torch_threads import intra_op_threads, set_threads

SCORES = "scores.zarr"  # next to the pool it scores
MAX_QUEUED = 2  # committed batches waiting for the scorer before sampling waits for it
SCORING_THREADS = 1  # intra-op threads of torch rewards on the CPU, in every process (a Dask worker's default)


def _torch_on_cpu(rewards: Mapping[str, Reward]) -> bool:
    return any(reward.uses_torch and torch_device(reward.device).type == "cpu" for reward in rewards.values())


@contextlib.contextmanager
def scoring_threads(rewards: Mapping[str, Reward]) -> Iterator[None]:
    """Score `rewards` with SCORING_THREADS intra-op threads when one of them is a torch reward on the CPU (the
    module's docstring says why), then restore the calling thread's count."""
    if not _torch_on_cpu(rewards):
        yield
        return
    with intra_op_threads(SCORING_THREADS):
        yield


class ScoreStore:
    """Per-reward scores of `n_rows` rows with a committed count each; mirrored to `path` when given."""

    def __init__(self, n_rows: int, rewards: Mapping[str, Reward], path: Path | None = None):
        self.n_rows = n_rows
        self.batch_sizes = {name: reward.batch_size for name, reward in rewards.items()}
        self.fingerprints = {name: reward.fingerprint() for name, reward in rewards.items()}
        self.values = {name: np.zeros(n_rows, np.float64) for name in rewards}
        self.committed = dict.fromkeys(rewards, 0)
        self.image_shape: list[int] | None = None
        self._group = None
        if path is not None:
            self.adopt(path)
            self._group = zarr.open_group(zarr_store(path), mode="w")
            for name, values in self.values.items():
                create_array(self._group, f"reward_{name}", data=values, chunks=(max(n_rows, 1),))
            self._save_attrs()

    def adopt(self, path: Path) -> None:
        """Take over the committed scores stored at `path` that were computed under the same fingerprints."""
        try:
            group = zarr.open_group(zarr_store(path), mode="r")
            attrs = dict(group.attrs)
            if attrs.get("n_rows") != self.n_rows:
                return
            self.image_shape = attrs.get("image_shape")
            for name in self.values:
                count = int(attrs.get("committed", {}).get(name, 0))
                if attrs.get("fingerprints", {}).get(name) == self.fingerprints[name] and count > 0:
                    self.values[name][:count] = group[f"reward_{name}"][:count]
                    self.committed[name] = count
        except (KeyError, ValueError, OSError, zarr.errors.BaseZarrError):
            return  # absent, or torn by a crash: score everything again

    def missing(self) -> int:
        return sum(self.n_rows - count for count in self.committed.values())

    def commit(self, name: str, start: int, values: np.ndarray) -> None:
        """Store rows [start, start + len) of one reward, then advance its committed count."""
        if start != self.committed[name]:
            raise ValueError(f"{name}: scores start at row {start} but {self.committed[name]} are committed")
        stop = start + len(values)
        self.values[name][start:stop] = values
        if self._group is not None:
            self._group[f"reward_{name}"][start:stop] = values
        self.committed[name] = stop
        self._save_attrs()

    def truncate(self, rows: int) -> None:
        """Forget every score from row `rows` on (back to the start of that row's batch): those rows are new."""
        changed = False
        for name, count in self.committed.items():
            if rows < count:
                self.committed[name] = (rows // self.batch_sizes[name]) * self.batch_sizes[name]
                changed = True
        if changed:
            self._save_attrs()

    def check_image_shape(self, shape: Sequence[int]) -> None:
        """Scores of images of another shape (a pool created again for other shapes) are forgotten."""
        shape = [int(s) for s in shape]
        if self.image_shape is not None and self.image_shape != shape:
            self.truncate(0)
        if self.image_shape != shape:
            self.image_shape = shape
            self._save_attrs()

    def _save_attrs(self) -> None:
        if self._group is not None:
            self._group.attrs.update({"n_rows": self.n_rows, "committed": dict(self.committed),
                                      "fingerprints": dict(self.fingerprints), "image_shape": self.image_shape})


class RowScorer:
    """Scores the rows of a pool that `store` is missing, reward by reward, each in its own aligned batches."""

    def __init__(self, store: ScoreStore, rewards: Mapping[str, Reward], prompts: Sequence[str], seeds: np.ndarray,
                 what: str, images: Callable[[int, int], np.ndarray], bar=None,
                 sources: Callable[[int, int], np.ndarray | None] | None = None):
        self.store, self.rewards, self.prompts, self.seeds = store, rewards, list(prompts), np.asarray(seeds)
        self.what, self.images, self.bar = what, images, bar
        self.sources = sources  # rows' source images, read only for a reward that scores edits

    def run(self, available: int) -> None:
        """Score every batch that lies within the first `available` rows (all rows once `available` is n_rows)."""
        with scoring_threads(self.rewards):
            self._run(available)

    def _run(self, available: int) -> None:
        n = self.store.n_rows
        for name, reward in self.rewards.items():
            start = self.store.committed[name]
            while start < available:
                stop = min(start + reward.batch_size, n)
                if stop > available:
                    break
                sources = self.sources(start, stop) if reward.edits and self.sources is not None else None
                values = reward.scores(self.images(start, stop), self.prompts[start:stop], progress=False,
                                       sources=sources)
                self._check_finite(name, values, start)
                self.store.commit(name, start, values)
                if self.bar is not None:
                    self.bar.update(stop - start)
                start = stop

    def _check_finite(self, name: str, values: np.ndarray, start: int) -> None:
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            row = start + int(bad[0])
            kind = "NaN" if np.isnan(values[bad[0]]) else "infinite"
            more = f" (and {len(bad) - 1} more rows of its batch)" if len(bad) > 1 else ""
            raise SolrlError(
                f"reward {name} is {kind} for row {row} of {self.what} (prompt {self.prompts[row]!r}, seed "
                f"{int(self.seeds[row])}){more}; the run stopped here and nothing was trained on it"
            )


class InlineScorer:
    """Scores a pool's batches on one background thread as the sampler commits them (the rewards, on their own
    device, run while the next batch samples; torch releases the GIL inside its kernels).

    Committed images are handed over in memory; rows committed before a resume are read back from the pool. At most
    MAX_QUEUED batches wait for the scorer: beyond that the sampler waits, so memory stays bounded. A scoring error
    (a NaN reward, say) is raised in the sampling thread at its next commit, or at `finish`. It draws no progress
    bar: the sampler's bar is the stage's one line on the terminal, and the sampler waits for the scorer.
    """

    def __init__(self, pool_path: Path, rewards: Mapping[str, Reward], prompts: Sequence[str], seeds: np.ndarray,
                 what: str):
        self.pool_path = pool_path
        self.store = ScoreStore(len(seeds), rewards, pool_path.parent / SCORES)
        self.store.truncate(_pool_committed(pool_path))
        self.scorer = RowScorer(self.store, rewards, prompts, seeds, what, self._images,
                                sources=row_sources(pool_path))
        self._buffer = np.zeros((0,), np.uint8)
        self._buffer_start = 0
        # the scorer thread keeps the scoring threads (`scoring_threads` then changes nothing per batch)
        pinned = SCORING_THREADS if _torch_on_cpu(rewards) else None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solrl-score",
                                            initializer=set_threads if pinned else None,
                                            initargs=(pinned,) if pinned else ())
        self._futures: deque[Future] = deque()

    def on_commit(self, start: int, columns: dict) -> None:
        """The sampler's hook: rows [start, start + len) are committed to the pool."""
        self._wait(keep=MAX_QUEUED - 1)
        images = np.array(columns["image"], copy=True)
        self._futures.append(self._executor.submit(self._advance, start, images))

    def finish(self) -> None:
        """Score what is left (the last short batches, rows of an earlier attempt) and wait for every score."""
        self._futures.append(self._executor.submit(self.scorer.run, self.store.n_rows))
        self._wait(keep=0)

    def close(self) -> None:
        for future in self._futures:
            future.cancel()
        self._executor.shutdown(wait=True)

    def _wait(self, keep: int) -> None:
        while self._futures and (len(self._futures) > keep or self._futures[0].done()):
            self._futures.popleft().result()  # re-raises the scorer's error in the sampling thread

    # ---- background thread -------------------------------------------------------------------------------------
    def _advance(self, start: int, images: np.ndarray) -> None:
        self.store.check_image_shape(images.shape[1:])
        self.store.truncate(start)
        if len(self._buffer) and start == self._buffer_start + len(self._buffer):
            self._buffer = np.concatenate([self._buffer, images])
        else:
            self._buffer, self._buffer_start = images, start
        self.scorer.run(start + len(images))
        done = min(self.store.committed.values()) - self._buffer_start  # rows every reward has scored
        if done > 0:
            self._buffer, self._buffer_start = self._buffer[done:], self._buffer_start + done

    def _images(self, start: int, stop: int) -> np.ndarray:
        if len(self._buffer) and self._buffer_start <= start and stop <= self._buffer_start + len(self._buffer):
            return self._buffer[start - self._buffer_start : stop - self._buffer_start]
        return np.asarray(zarr.open_group(zarr_store(self.pool_path), mode="r")["image"][start:stop])  # committed rows


def _pool_committed(pool_path: Path) -> int:
    try:
        return int(zarr.open_group(zarr_store(pool_path), mode="r").attrs.get("committed", 0))
    except (KeyError, ValueError, OSError, zarr.errors.BaseZarrError):
        return 0


def _what(ctx: StageContext, pool_path: Path) -> str:
    """How messages name the pool, e.g. "explore/pool.zarr of iteration 3"."""
    stage = pool_path.parent.name.removesuffix(".partial")
    return f"{stage}/{pool_path.name} of iteration {ctx.iteration}"


@contextlib.contextmanager
def scoring_while_sampling(
    ctx: StageContext, pool_path: Path, prompts: Sequence[str], seeds: np.ndarray, overlap: bool | None = None
) -> Iterator[Callable[[int, dict], None] | None]:
    """The `on_commit` hook that scores the pool at `pool_path` while it samples (None when `score.overlap` is off).

    prompts/seeds: per row. Leaving the block normally waits for the last scores; leaving it by an exception stops
    the scorer after its current batch (what it committed is kept for the resume). `overlap` overrides
    `score.overlap` (a pool sampled in shards by several processes is scored afterwards: solrl_core/stages/shards.py).
    """
    if not (ctx.cfg.score.overlap if overlap is None else overlap):
        remove_tree(pool_path.parent / SCORES)  # left by an overlapped attempt: not kept up
        yield None
        return
    rewards = load_rewards(ctx.cfg.rewards, ctx.cfg.reward_models)  # missing files fail before any sampling
    scorer = InlineScorer(pool_path, rewards, prompts, seeds, _what(ctx, pool_path))
    try:
        yield scorer.on_commit
        scorer.finish()
    finally:
        scorer.close()


def score_pool(ctx: StageContext, pool_path: Path, desc: str, weights: Mapping[str, float] | None = None
               ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Weighted reward (float32) and each reward's column (float32) for every row of the pool at `pool_path`,
    taking the rows already scored while it was sampled from `scores.zarr` beside it. `weights`: the rewards and
    their weights (default: the training rewards)."""
    weights = weights or ctx.cfg.rewards
    group = zarr.open_group(zarr_store(pool_path), mode="r")
    row_prompts, seeds = _rows(group)
    rewards = load_rewards(weights, ctx.cfg.reward_models)
    store = ScoreStore(len(seeds), rewards)
    if (pool_path.parent / SCORES).exists():
        store.adopt(pool_path.parent / SCORES)
    what = _what(ctx, pool_path)
    images = group["image"]
    todo = store.missing()  # 0 when every row was scored while sampling: then no bar at all
    with tqdm(total=todo, desc=desc, unit="score", disable=not ctx.progress or not todo, leave=False) as bar:
        RowScorer(store, rewards, row_prompts, seeds, what, lambda a, b: np.asarray(images[a:b]), bar,
                  row_sources(pool_path)).run(len(seeds))
    return _totals(store.values, weights)


def row_sources(pool_path: Path) -> Callable[[int, int], np.ndarray | None]:
    """rows a..b -> the source images of their prompts (rows, sources, H, W, 3) from the pool's `source_image`
    (read once, when first asked), or None for a pool without sources. Rows are read once committed: a scorer asks
    for rows that are."""
    loaded: dict = {}

    def rows(start: int, stop: int) -> np.ndarray | None:
        if not loaded:
            group = zarr.open_group(zarr_store(pool_path), mode="r")
            loaded["group"] = group
            loaded["per_prompt"] = np.asarray(group[SOURCE_ARRAY]) if SOURCE_ARRAY in group else None
        if loaded["per_prompt"] is None:
            return None
        return loaded["per_prompt"][np.asarray(loaded["group"]["prompt_index"][start:stop])]

    return rows


def _rows(group) -> tuple[list[str], np.ndarray]:
    """(prompt, seed) of every row of a pool."""
    prompts = list(group.attrs["prompts"])
    return [prompts[i] for i in np.asarray(group["prompt_index"][...])], np.asarray(group["seed"][...])


def _totals(values: Mapping[str, np.ndarray], weights: Mapping[str, float]) -> tuple[np.ndarray, dict]:
    total = weighted_sum(values, weights)
    return total.astype(np.float32), {name: column.astype(np.float32) for name, column in values.items()}


@dataclass(frozen=True)
class PoolScoring:
    """The rewards of every row of a pool, as work split over devices (solrl_core/stages/shards.py): a shard scores
    a range of rows that starts on a batch boundary of every reward, so each reward forms the batches it forms on
    one device and the scores are the same. Shards hand their scores back; nothing is written until all are in."""

    pool: Path
    weights: dict[str, float]
    desc: str
    n_rows: int
    unit: int  # the lcm of the rewards' batch sizes
    release: tuple[str, ...] = ()  # rewards the process forgets once it has scored (`release_rewards`)
    bar_unit = "row"

    def prepare(self, ctx: StageContext) -> None:
        return None

    def rows_done(self) -> None:
        return None  # shards hand their scores back at the end: nothing to read before

    def finished(self) -> bool:
        return False

    def whole(self, ctx: StageContext) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        try:
            return score_pool(ctx, self.pool, self.desc, self.weights)
        finally:
            release_rewards(self.release)

    def run_shard(self, ctx: StageContext, shard) -> tuple[dict, dict[str, list[float]]]:
        rows = shard.rows(self.unit, self.n_rows)
        group = zarr.open_group(zarr_store(self.pool), mode="r")
        row_prompts, seeds = _rows(group)
        rewards = load_rewards(self.weights, ctx.cfg.reward_models)
        store = ScoreStore(self.n_rows, rewards)
        store.committed = dict.fromkeys(rewards, rows.start)
        images = group["image"]
        what = _what(ctx, self.pool)
        try:
            RowScorer(store, rewards, row_prompts, seeds, what, lambda a, b: np.asarray(images[a:b]),
                      sources=row_sources(self.pool)).run(rows.stop)
        finally:
            release_rewards(self.release)
        return {"scored": len(rows)}, {name: values[rows.start:rows.stop].tolist() for name, values in
                                       store.values.items()}

    def collect(self, ctx: StageContext, reports: list[dict]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        reports = sorted(reports, key=lambda report: report["shard"])
        values = {name: np.concatenate([np.asarray(r["result"][name], np.float64) for r in reports])
                  for name in self.weights}
        if any(len(column) != self.n_rows for column in values.values()):
            raise SolrlError(f"{self.desc}: the shards scored {len(next(iter(values.values())))} of {self.n_rows} rows")
        return _totals(values, self.weights)


def pool_scoring(ctx: StageContext, pool_path: Path, desc: str, weights: Mapping[str, float] | None = None
                 ) -> PoolScoring:
    """The scoring of the pool at `pool_path` with `weights` (default: the training rewards); the rewards of
    `weights` that do not train (an evaluation's gold or own rewards) are released once scored, so they hold no
    device memory between evaluations."""
    weights = dict(weights or ctx.cfg.rewards)
    n_rows = int(zarr.open_group(zarr_store(pool_path), mode="r").attrs["n_rows"])
    unit = math.lcm(*(reward_batch_size(name, ctx.cfg.reward_models) for name in weights))
    release = tuple(name for name in weights if name not in ctx.cfg.rewards)
    return PoolScoring(pool_path, weights, desc, n_rows, unit, release)
