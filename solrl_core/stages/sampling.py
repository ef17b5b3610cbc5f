"""Batched, resumable sampling of candidates into a zarr pool (shared by explore and regenerate)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from solrl_core.pool import CandidateWriter
from solrl_core.sampler import make_scheduler, sample_euler


def sample_into_pool(
    path: Path,
    backbone,
    transformer: torch.nn.Module,
    prompts: list[str],
    prompt_index: np.ndarray,
    seeds: np.ndarray,
    steps: int,
    batch_size: int,
    keep_latents: bool,
    attrs: dict,
    progress: bool,
    desc: str,
    extra_columns: dict[str, np.ndarray] | None = None,
) -> CandidateWriter:
    """Sample row i from seed `seeds[i]` with prompt `prompts[prompt_index[i]]`, batch by batch, committing each.

    Batches are aligned to multiples of `batch_size` from row 0, so a resumed run forms exactly the same batches
    as an uninterrupted one (numerics that depend on the batch, like per-tensor activation scales, then match too).
    """
    n = len(seeds)
    image_shape = backbone.decode(torch.zeros(1, *backbone.latent_shape)).shape[1:]
    sigmas = [float(s) for s in make_scheduler(steps).sigmas]
    writer = CandidateWriter.open(
        path,
        n,
        tuple(image_shape),
        tuple(backbone.latent_shape) if keep_latents else None,
        {**attrs, "prompts": prompts, "steps": steps, "sigmas": sigmas, "batch_size": batch_size},
        extra_dtypes={name: str(values.dtype) for name, values in (extra_columns or {}).items()},
    )
    start = writer.committed
    bar = tqdm(total=n, initial=start, desc=desc, unit="img", disable=not progress)
    while start < n:
        rows = slice(start, min(start + batch_size, n))
        batch_prompts = [prompts[i] for i in prompt_index[rows]]
        cond = backbone.encode_prompts(batch_prompts)
        noise = backbone.initial_noise(seeds[rows].tolist())
        result = sample_euler(backbone, transformer, cond, noise, steps)
        columns = {
            "prompt_index": prompt_index[rows].astype(np.int32),
            "seed": seeds[rows].astype(np.int64),
            "image": backbone.decode(result.x0),
        }
        if keep_latents:
            columns["latent"] = result.x0.float().numpy()
        for name, values in (extra_columns or {}).items():
            columns[name] = values[rows]
        writer.write_batch(start, columns)
        bar.update(rows.stop - start)
        start = rows.stop
    bar.close()
    return writer
