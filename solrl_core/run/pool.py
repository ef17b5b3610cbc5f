"""Candidate pools in zarr.

A pool is a zarr group with one row per candidate: `prompt_index`, `seed`, `image` (uint8 H×W×3, one chunk per
candidate) and optionally `latent` (the clean final latent). Rows are written in batches of the pool's
`batch_size`; `batch_done[k]` marks batch k complete, and the group attribute `committed` counts the rows complete
from row 0 on (the leading run of done batches). A batch torn by a crash is not marked and is simply written again
on resume, so no candidate is lost or duplicated. Several processes may fill disjoint batches at once (shards).

Small per-candidate tables (rewards, selection) are written whole with `write_table`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import zarr

from solrl_core.errors import SolrlError
from solrl_core.run.storage import zarr_store

DONE = "batch_done"  # per-batch completion markers, one chunk each
# Chunk files named "c.<row>.0.0.0" side by side in their array's directory, not "c/<row>/0/0/0" (zarr 3's default):
# a pool of 192 rows was ≈1,200 directories, created by the writers and walked by every integrity check.
FLAT_KEYS = {"name": "default", "separator": "."}


def create_array(group: zarr.Group, name: str, **kwargs) -> zarr.Array:
    """`group.create_array` with FLAT_KEYS chunk names: how every pool, table and score array is created."""
    return group.create_array(name, chunk_key_encoding=FLAT_KEYS, **kwargs)


class CandidateWriter:
    """Fill a fixed-size pool batch by batch, resumable at any batch not yet done.

    The commit unit is the sampling batch: batch k holds rows [k*batch_size, (k+1)*batch_size). Each batch has its
    own completion marker (`batch_done[k]`, a chunk of its own), set after the batch's rows are written, so several
    processes can fill disjoint batches of one pool at once (shards, solrl_core/stages/shards.py); the 1-D columns
    are chunked by batch for the same reason. Group attributes are one JSON document that concurrent writers would
    overwrite, so only a writer that owns the whole pool (`in_order`) updates the `committed` attribute; after
    shards, `sync_committed` brings it up to date.
    """

    def __init__(self, group: zarr.Group):
        self.group = group
        self.n_rows = int(group.attrs["n_rows"])
        self.batch_size = int(group.attrs["batch_size"])
        self._done = np.asarray(group[DONE][...], dtype=bool)  # this writer's view; it writes only its own batches

    @classmethod
    def open(
        cls,
        path: Path,
        n_rows: int,
        image_shape: tuple[int, ...],
        latent_shape: tuple[int, ...] | None,
        attrs: dict[str, Any],
        extra_dtypes: dict[str, str] | None = None,
        batch_size: int = 1,
        create: bool = True,
        row_arrays: dict[str, tuple[tuple[int, ...], str]] | None = None,
        prompt_arrays: dict[str, np.ndarray] | None = None,
    ) -> CandidateWriter:
        """Open the pool at `path` to continue it, or create it when absent or made for other shapes or batches.

        `row_arrays`: more per-row arrays, name -> (shape of one row, dtype), one chunk per row (an SDE trajectory).
        `prompt_arrays`: arrays of the pool's prompts written whole when the pool is created (edit sources).
        `create=False` (a shard joining a pool made for it): a missing or different pool is an error instead.
        """
        if path.exists():
            try:
                group = zarr.open_group(zarr_store(path), mode="r+")
                same = (
                    group.attrs.get("n_rows") == n_rows
                    and group.attrs.get("batch_size") == batch_size
                    and DONE in group
                    and tuple(group["image"].shape[1:]) == tuple(image_shape)
                    and ("latent" in group) == (latent_shape is not None)
                    and all(name in group for name in (extra_dtypes or {}))
                    and all(name in group and tuple(group[name].shape[1:]) == tuple(shape)
                            for name, (shape, _) in (row_arrays or {}).items())
                    and all(name in group and group[name].shape == values.shape
                            for name, values in (prompt_arrays or {}).items())
                )
                if same:
                    return cls(group)
            except (KeyError, ValueError, OSError, zarr.errors.BaseZarrError):
                pass  # killed while the pool was being created: start it again
        if not create:
            raise SolrlError(f"the pool {path} is missing or was made for other shapes or batch size; "
                             "run the stage again to create it")
        group = zarr.open_group(zarr_store(path), mode="w")
        group.attrs.update({**attrs, "n_rows": n_rows, "batch_size": batch_size, "committed": 0})
        rows = (max(min(batch_size, n_rows), 1),)
        create_array(group, "prompt_index", shape=(n_rows,), dtype="int32", chunks=rows, fill_value=-1)
        create_array(group, "seed", shape=(n_rows,), dtype="int64", chunks=rows, fill_value=-1)
        create_array(group, "image", shape=(n_rows, *image_shape), dtype="uint8", chunks=(1, *image_shape))
        for name, dtype in (extra_dtypes or {}).items():
            create_array(group, name, shape=(n_rows,), dtype=dtype, chunks=rows, fill_value=-1)
        if latent_shape is not None:
            create_array(group, "latent", shape=(n_rows, *latent_shape), dtype="float32", chunks=(1, *latent_shape))
        for name, (shape, dtype) in (row_arrays or {}).items():
            create_array(group, name, shape=(n_rows, *shape), dtype=dtype, chunks=(1, *shape))
        for name, values in (prompt_arrays or {}).items():  # before the done flags: a pool without them is remade
            array = create_array(group, name, shape=values.shape, dtype=values.dtype, chunks=(1, *values.shape[1:]))
            array[...] = values
        create_array(group, DONE, shape=(batch_count(n_rows, batch_size),), dtype="uint8", chunks=(1,), fill_value=0)
        return cls(group)

    @property
    def n_batches(self) -> int:
        return len(self._done)

    def batch_rows(self, k: int) -> slice:
        return slice(k * self.batch_size, min((k + 1) * self.batch_size, self.n_rows))

    def pending(self, batches: range | None = None) -> list[int]:
        """The batches (all, or those in `batches`) not done yet, in order."""
        return [k for k in (batches if batches is not None else range(self.n_batches)) if not self._done[k]]

    def rows_in(self, batches) -> int:
        """Rows of the batches `batches` (the last batch may be shorter)."""
        return sum(len(range(self.n_rows)[self.batch_rows(k)]) for k in batches)

    def rows_done(self) -> int:
        """Rows of every batch marked done (in any order), as this writer last read the markers."""
        return self.rows_in(np.flatnonzero(self._done))

    @property
    def committed(self) -> int:
        """Rows complete from row 0 on: the leading run of done batches (rows beyond may be done too)."""
        return leading_rows(self._done, self.batch_size, self.n_rows)

    def write_batch(self, start: int, columns: dict[str, np.ndarray], in_order: bool = True) -> None:
        """Write rows [start, start + len) of every column (whole batches), then mark their batches done.

        `in_order` (this writer owns the whole pool): the rows must start at `committed`, and the `committed`
        attribute advances. A shard writer (`in_order=False`) writes any of its batches and leaves the attribute
        alone (see `sync_committed`).
        """
        length = len(next(iter(columns.values())))
        stop = start + length
        if in_order and start != self.committed:
            raise ValueError(f"batch starts at row {start} but {self.committed} rows are committed")
        if start % self.batch_size or (stop % self.batch_size and stop != self.n_rows) or stop > self.n_rows:
            raise ValueError(f"rows [{start}, {stop}) are not whole batches of {self.batch_size} of {self.n_rows} rows")
        for name, values in columns.items():
            self.group[name][start:stop] = values
        first, last = start // self.batch_size, -(-stop // self.batch_size)
        self.group[DONE][first:last] = 1
        self._done[first:last] = True
        if in_order:
            self.group.attrs["committed"] = self.committed

    def sync_committed(self) -> int:
        """Re-read every batch marker (shards wrote them) and store the leading run as the `committed` attribute."""
        self._done = np.asarray(self.group[DONE][...], dtype=bool)
        self.group.attrs["committed"] = self.committed
        return self.committed


def batch_count(n_rows: int, batch_size: int) -> int:
    return -(-n_rows // batch_size)


def leading_rows(done: np.ndarray, batch_size: int, n_rows: int) -> int:
    """Rows covered by the leading run of True in `done` (per-batch flags)."""
    missing = np.flatnonzero(~np.asarray(done, dtype=bool))
    return n_rows if len(missing) == 0 else min(int(missing[0]) * batch_size, n_rows)


def write_table(path: Path, columns: dict[str, np.ndarray], attrs: dict[str, Any] | None = None) -> None:
    """Write a whole per-candidate table as a zarr group of 1-D (or N-D) arrays."""
    group = zarr.open_group(zarr_store(path), mode="w")
    group.attrs.update(attrs or {})
    for name, values in columns.items():
        values = np.asarray(values)
        chunks = values.shape if values.ndim <= 1 else (1, *values.shape[1:])
        create_array(group, name, data=values, chunks=tuple(max(c, 1) for c in chunks))


def read_table(path: Path, names: list[str] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read columns (all, or `names`) and attributes of a zarr group written by this module."""
    group = zarr.open_group(zarr_store(path), mode="r")
    keys = names if names is not None else sorted(k for k, _ in group.arrays())
    return {k: np.asarray(group[k][...]) for k in keys}, dict(group.attrs)


def column_names(path: Path) -> set[str]:
    """The columns (arrays) of a zarr group written by this module."""
    return {name for name, _ in zarr.open_group(zarr_store(path), mode="r").arrays()}


def read_rows(path: Path, name: str, rows: np.ndarray) -> np.ndarray:
    """Rows `rows` of one column (e.g. a selection's images) without reading the whole array."""
    array = zarr.open_group(zarr_store(path), mode="r")[name]
    return np.asarray(array.oindex[np.asarray(rows, dtype=np.int64)])
