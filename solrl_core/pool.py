"""Candidate pools in zarr.

A pool is a zarr group with one row per candidate: `prompt_index`, `seed`, `image` (uint8 H×W×3, one chunk per
candidate) and optionally `latent` (the clean final latent). Rows are written in batches; the group attribute
`committed` counts the rows that are complete. A batch torn by a crash lies beyond `committed` and is simply
written again on resume, so no candidate is lost or duplicated.

Small per-candidate tables (rewards, selection) are written whole with `write_table`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import zarr


class CandidateWriter:
    """Fill a fixed-size pool batch by batch, resumable at the committed row."""

    def __init__(self, group: zarr.Group):
        self.group = group

    @classmethod
    def open(
        cls,
        path: Path,
        n_rows: int,
        image_shape: tuple[int, ...],
        latent_shape: tuple[int, ...] | None,
        attrs: dict[str, Any],
        extra_dtypes: dict[str, str] | None = None,
    ) -> CandidateWriter:
        """Open the pool at `path` to continue it, or create it when absent or made for other shapes."""
        if path.exists():
            try:
                group = zarr.open_group(path, mode="r+")
                same = (
                    group.attrs.get("n_rows") == n_rows
                    and tuple(group["image"].shape[1:]) == tuple(image_shape)
                    and ("latent" in group) == (latent_shape is not None)
                    and all(name in group for name in (extra_dtypes or {}))
                )
            except (KeyError, ValueError, OSError, zarr.errors.BaseZarrError):
                same = False  # killed while the pool was being created: start it again
            if same:
                return cls(group)
        group = zarr.open_group(path, mode="w")
        group.attrs.update({**attrs, "n_rows": n_rows, "committed": 0})
        group.create_array("prompt_index", shape=(n_rows,), dtype="int32", chunks=(max(n_rows, 1),), fill_value=-1)
        group.create_array("seed", shape=(n_rows,), dtype="int64", chunks=(max(n_rows, 1),), fill_value=-1)
        group.create_array("image", shape=(n_rows, *image_shape), dtype="uint8", chunks=(1, *image_shape))
        for name, dtype in (extra_dtypes or {}).items():
            group.create_array(name, shape=(n_rows,), dtype=dtype, chunks=(max(n_rows, 1),), fill_value=-1)
        if latent_shape is not None:
            group.create_array("latent", shape=(n_rows, *latent_shape), dtype="float32", chunks=(1, *latent_shape))
        return cls(group)

    @property
    def committed(self) -> int:
        return int(self.group.attrs["committed"])

    def write_batch(self, start: int, columns: dict[str, np.ndarray]) -> None:
        """Write rows [start, start + len) of every column, then advance the commit marker."""
        if start != self.committed:
            raise ValueError(f"batch starts at row {start} but {self.committed} rows are committed")
        length = len(next(iter(columns.values())))
        for name, values in columns.items():
            self.group[name][start : start + length] = values
        self.group.attrs["committed"] = start + length


def write_table(path: Path, columns: dict[str, np.ndarray], attrs: dict[str, Any] | None = None) -> None:
    """Write a whole per-candidate table as a zarr group of 1-D (or N-D) arrays."""
    group = zarr.open_group(path, mode="w")
    group.attrs.update(attrs or {})
    for name, values in columns.items():
        values = np.asarray(values)
        chunks = values.shape if values.ndim <= 1 else (1, *values.shape[1:])
        group.create_array(name, data=values, chunks=tuple(max(c, 1) for c in chunks))


def read_table(path: Path, names: list[str] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read columns (all, or `names`) and attributes of a zarr group written by this module."""
    group = zarr.open_group(path, mode="r")
    keys = names if names is not None else sorted(k for k, _ in group.arrays())
    return {k: np.asarray(group[k][...]) for k in keys}, dict(group.attrs)


def read_rows(path: Path, name: str, rows: np.ndarray) -> np.ndarray:
    """Rows `rows` of one column (e.g. a selection's images) without reading the whole array."""
    array = zarr.open_group(path, mode="r")[name]
    return np.asarray(array.oindex[np.asarray(rows, dtype=np.int64)])
