"""Batched, resumable sampling of candidates into a zarr pool (shared by explore, regenerate and the audit).

The run's sampling settings come from the stage context: the solver (`model.sampler`, else the backbone's default),
the rollout guidance (`guidance.rollout`) and the conditioning from the run's text-embedding cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from solrl_core.pool import CandidateWriter
from solrl_core.sampler import resolve_sampler, sample, schedule_sigmas


@dataclass(frozen=True)
class SamplingSettings:
    sampler: str
    guidance: float
    encode: Callable  # prompts -> batch-first conditioning
    uncond: dict | None  # the empty prompt's conditioning when classifier-free guidance is on


def sampling_settings(ctx, backbone, guidance: float | None = None) -> SamplingSettings:
    """The run's solver, guidance (default `guidance.rollout`) and text cache; `ctx` None = the backbone's default
    solver, no guidance, its own text encoders."""
    if ctx is None:
        return SamplingSettings(resolve_sampler(None, backbone), 1.0, backbone.encode_prompts, None)
    g = ctx.cfg.guidance.rollout if guidance is None else guidance
    uncond = ctx.encode([""]) if g != 1.0 and not backbone.defaults.distilled_guidance else None
    return SamplingSettings(resolve_sampler(ctx.cfg.model.sampler, backbone), g, ctx.encode, uncond)


def open_pool(
    path: Path,
    backbone,
    prompts: list[str],
    n_rows: int,
    steps: int,
    batch_size: int,
    keep_latents: bool,
    attrs: dict,
    extra_columns: dict[str, np.ndarray] | None = None,
    ctx=None,
    create: bool = True,
) -> CandidateWriter:
    """The pool `sample_into_pool` fills (created when absent or made for other shapes, unless `create` is false).

    With a stage context, every prompt of the pool is put in the run's text cache first, in order, so that the
    cached conditioning does not depend on how the pool's batches are later split across processes.
    """
    image_shape = backbone.decode(torch.zeros(1, *backbone.latent_shape)).shape[1:]
    settings = sampling_settings(ctx, backbone)
    if ctx is not None:
        ctx.encode(list(dict.fromkeys(prompts)))
    return CandidateWriter.open(
        path,
        n_rows,
        tuple(image_shape),
        tuple(backbone.latent_shape) if keep_latents else None,
        {**attrs, "prompts": prompts, "steps": steps, "sigmas": schedule_sigmas(backbone, steps),
         "batch_size": batch_size, "sampler": settings.sampler, "guidance": settings.guidance},
        extra_dtypes={name: str(values.dtype) for name, values in (extra_columns or {}).items()},
        batch_size=batch_size,
        create=create,
    )


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
    on_commit: Callable[[int, dict], None] | None = None,
    ctx=None,
    batches: range | None = None,
) -> CandidateWriter:
    """Sample row i from seed `seeds[i]` with prompt `prompts[prompt_index[i]]`, batch by batch, committing each.

    Batches are aligned to multiples of `batch_size` from row 0, so a resumed run forms exactly the same batches
    as an uninterrupted one (numerics that depend on the batch, like per-tensor activation scales, then match too).
    Batches already done are skipped. `batches` (a shard): sample only those batch indices of a pool that already
    exists (`open_pool`), while other processes sample the others; None = the whole pool, in order.
    `on_commit(start, columns)` is called after each batch is committed (e.g. to score it while the next samples).
    `ctx` (the stage's context) gives the run's sampling settings (`sampling_settings`); the pool's attributes
    record the solver, the guidance and the sigmas (the update trains on those times).
    """
    writer = open_pool(path, backbone, prompts, len(seeds), steps, batch_size, keep_latents, attrs, extra_columns,
                       ctx, create=batches is None)
    settings = sampling_settings(ctx, backbone)
    todo = writer.pending(batches)
    mine = batches if batches is not None else range(writer.n_batches)
    total, left = (sum(len(range(writer.n_rows)[writer.batch_rows(k)]) for k in ks) for ks in (mine, todo))
    bar = tqdm(total=total, initial=total - left, desc=desc, unit="img", disable=not progress)
    for k in todo:
        rows = writer.batch_rows(k)
        batch_prompts = [prompts[i] for i in prompt_index[rows]]
        cond = settings.encode(batch_prompts)
        noise = backbone.initial_noise(seeds[rows].tolist())
        result = sample(backbone, transformer, cond, noise, steps, sampler=settings.sampler,
                        guidance=settings.guidance, uncond=settings.uncond)
        columns = {
            "prompt_index": prompt_index[rows].astype(np.int32),
            "seed": seeds[rows].astype(np.int64),
            "image": backbone.decode(result.x0),
        }
        if keep_latents:
            columns["latent"] = result.x0.float().cpu().numpy()
        for name, values in (extra_columns or {}).items():
            columns[name] = values[rows]
        writer.write_batch(rows.start, columns, in_order=batches is None)
        if on_commit is not None:
            on_commit(rows.start, columns)
        bar.update(rows.stop - rows.start)
    bar.close()
    return writer
