"""Batched, resumable sampling of candidates into a zarr pool (shared by explore, regenerate and the audit).

The run's sampling settings come from the stage context: the solver (`model.sampler`, else the backbone's default),
the rollout guidance (`guidance.rollout`), the conditioning from the run's text-embedding cache, and the objective's
SDE (`objective.name`: Flow-GRPO samples its rollouts on an SDE, solrl_core/models/sde_sampler.py; the evaluation
always integrates the ODE). A pool that keeps trajectories stores, per row, the SDE window's latents and the
sampling policy's log-probabilities (columns `trajectory` and `log_prob`; attribute `sde_window`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import zarr
from tqdm.auto import tqdm

from solrl_core.edit_sources import SOURCE_ARRAY, SOURCES_ATTR, Sources, source_array
from solrl_core.errors import SolrlError
from solrl_core.run.pool import CandidateWriter
from solrl_core.models.compiled import compiled_copy
from solrl_core.models.explore_decode import DecodePlan, decode_samples
from solrl_core.models.sampler import resolve_sampler, sample, schedule_sigmas
from solrl_core.models.sde_sampler import sample_sde
from solrl_core.seeds import derived_generator
from solrl_core.rl.objectives import objective_for
from solrl_core.run.storage import zarr_store
from solrl_core.stages.draws import PURPOSE_SDE_WINDOW


TRAJECTORY_COLUMNS = ("trajectory", "log_prob")  # what a pool that keeps trajectories holds per row, beside `latent`


@dataclass(frozen=True)
class SamplingSettings:
    sampler: str
    guidance: float
    encode: Callable  # prompts -> batch-first conditioning
    uncond: dict | None  # the empty prompt's conditioning under classifier-free guidance (an editing model: None)
    noise_level: float = 0.0  # the rollouts' SDE (0: the ODE solver `sampler`)
    sde_window: Callable[[int], tuple[int, int] | None] = lambda steps: None  # steps -> the SDE steps [start, stop)
    guided: bool = False  # classifier-free guidance: an unconditional branch beside the prompt's

    def uncond_of(self, sources: list | None = None) -> dict | None:
        """The unconditional branch of a batch: the empty prompt's, or for edit prompts (`sources`: each row's
        source images) the empty prompt with each row's sources, as diffusers' edit pipelines encode their negative
        prompt with the image (from the run's text cache, like every prompt); None without guidance."""
        if not self.guided:
            return None
        if sources is None:
            return self.uncond if self.uncond is not None else self.encode([""])
        return self.encode([""] * len(sources), sources)


def sampling_settings(ctx, backbone, guidance: float | None = None, sde: bool = True) -> SamplingSettings:
    """The run's solver, guidance (default `guidance.rollout`), text cache and, for rollouts (`sde`), the objective's
    SDE; `ctx` None = the backbone's default solver, no guidance, its own text encoders."""
    if ctx is None:
        return SamplingSettings(resolve_sampler(None, backbone), 1.0, backbone.encode_prompts, None)
    g = ctx.cfg.guidance.rollout if guidance is None else guidance
    guided = g != 1.0 and not backbone.defaults.distilled_guidance
    uncond = ctx.encode([""]) if guided and not backbone.edits else None  # an editing model's: per batch
    settings = SamplingSettings(resolve_sampler(ctx.cfg.model.sampler, backbone), g, ctx.encode, uncond,
                                guided=guided)
    objective = objective_for(ctx.cfg)
    if sde and objective.sampling_noise_level() > 0:
        keys = (ctx.cfg.seed, ctx.iteration, PURPOSE_SDE_WINDOW)  # the iteration's window, in every stage alike
        return replace(settings, noise_level=objective.sampling_noise_level(),
                       sde_window=lambda steps: objective.sde_window(steps, derived_generator(*keys)))
    return settings


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
    guidance: float | None = None,
    sde: bool = True,
    keep_trajectory: bool = False,
    sources: list[Sources] | None = None,
) -> CandidateWriter:
    """The pool `sample_into_pool` fills (created when absent or made for other shapes, unless `create` is false).

    With a stage context, every prompt of the pool is put in the run's text cache first, in order, so that the
    cached conditioning does not depend on how the pool's batches are later split across processes. Edit prompts'
    `sources` (per prompt) are kept in the pool: their paths as an attribute, the images at the generated size as an
    array (solrl_core/edit_sources.py).
    """
    image_shape = backbone.decode(torch.zeros(1, *backbone.latent_shape)).shape[1:]
    settings = sampling_settings(ctx, backbone, guidance, sde)
    if sources is not None and ctx is None:
        raise SolrlError("sampling edit prompts (with source images) needs a run's stage context")
    if ctx is not None:
        ctx.encode(list(dict.fromkeys(prompts)) if sources is None else prompts, sources)
    window = settings.sde_window(steps) if settings.noise_level > 0 else None
    row_arrays = {}
    if keep_trajectory:
        if window is None:
            raise SolrlError("a pool that keeps SDE trajectories needs an objective that samples on an SDE "
                             "(objective.name: flow_grpo)")
        width = window[1] - window[0]
        row_arrays = dict(zip(TRAJECTORY_COLUMNS, (((width + 1, *backbone.latent_shape), "float32"),
                                                   ((width,), "float32"))))
    sde_attrs = {"noise_level": settings.noise_level, "sde_window": list(window)} if window is not None else {}
    source_attrs, prompt_arrays = {}, None
    if sources is not None:
        source_attrs = {SOURCES_ATTR: [list(s) for s in sources]}
        prompt_arrays = {SOURCE_ARRAY: source_array(sources, *image_shape[-3:-1])}
    return CandidateWriter.open(
        path,
        n_rows,
        tuple(image_shape),
        tuple(backbone.latent_shape) if keep_latents else None,
        {**attrs, "prompts": prompts, "steps": steps, "sigmas": schedule_sigmas(backbone, steps),
         "batch_size": batch_size, "sampler": "sde" if window is not None else settings.sampler,
         "guidance": settings.guidance, **sde_attrs, **source_attrs},
        extra_dtypes={name: str(values.dtype) for name, values in (extra_columns or {}).items()},
        batch_size=batch_size,
        create=create,
        row_arrays=row_arrays,
        prompt_arrays=prompt_arrays,
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
    guidance: float | None = None,
    sde: bool = True,
    keep_trajectory: bool = False,
    sources: list[Sources] | None = None,
    decode: DecodePlan | None = None,
) -> CandidateWriter:
    """Sample row i from seed `seeds[i]` with prompt `prompts[prompt_index[i]]` (and an edit prompt's source images
    `sources[prompt_index[i]]`), batch by batch, committing each.

    Batches are aligned to multiples of `batch_size` from row 0, so a resumed run forms exactly the same batches
    as an uninterrupted one (numerics that depend on the batch, like per-tensor activation scales, then match too).
    Batches already done are skipped. `batches` (a shard): sample only those batch indices of a pool that already
    exists (`open_pool`), while other processes sample the others; None = the whole pool, in order.
    `on_commit(start, columns)` is called after each batch is committed (e.g. to score it while the next samples).
    `ctx` (the stage's context) gives the run's sampling settings (`sampling_settings`); the pool's attributes
    record the solver, the guidance and the sigmas (the update trains on those times). `guidance`: the scale
    (default: the run's `guidance.rollout`). `sde`: rollouts of the objective's SDE (false: the ODE, as the
    evaluation); `keep_trajectory`: store the SDE window's latents and log-probabilities per row.
    """
    writer = open_pool(path, backbone, prompts, len(seeds), steps, batch_size, keep_latents, attrs, extra_columns,
                       ctx, create=batches is None, guidance=guidance, sde=sde, keep_trajectory=keep_trajectory,
                       sources=sources)
    settings = sampling_settings(ctx, backbone, guidance, sde)
    todo = writer.pending(batches)
    mine = batches if batches is not None else range(writer.n_batches)
    total, left = writer.rows_in(mine), writer.rows_in(todo)
    bar = tqdm(total=total, initial=total - left, desc=desc, unit="img", disable=not progress or not left)
    for k in todo:
        rows = writer.batch_rows(k)
        batch_prompts = [prompts[i] for i in prompt_index[rows]]
        batch_sources = None if sources is None else [sources[i] for i in prompt_index[rows]]
        if sources is None:
            cond = settings.encode(batch_prompts)
        else:
            cond = settings.encode(batch_prompts, batch_sources)
        uncond = settings.uncond_of(batch_sources)
        if settings.noise_level > 0:
            result = sample_sde(backbone, transformer, cond, seeds[rows].tolist(), steps, settings.noise_level,
                                settings.sde_window(steps), guidance=settings.guidance, uncond=uncond)
        else:
            noise = backbone.initial_noise(seeds[rows].tolist())
            result = sample(backbone, transformer, cond, noise, steps, sampler=settings.sampler,
                            guidance=settings.guidance, uncond=uncond)
        if not bool(torch.isfinite(result.x0).all()):  # one read per batch (none per step): NaN would decode silently
            raise SolrlError(f"{desc}: rows {rows.start} to {rows.stop - 1} sampled to NaN or infinite latents (the "
                             "model overflowed at this precision, or its weights are damaged); nothing of the batch "
                             "was written")
        columns = {
            "prompt_index": prompt_index[rows].astype(np.int32),
            "seed": seeds[rows].astype(np.int64),
            "image": decode_samples(backbone, result.x0, decode),
        }
        if keep_latents:
            columns["latent"] = result.x0.float().cpu().numpy()
        if keep_trajectory:
            columns.update(zip(TRAJECTORY_COLUMNS, (result.latents.cpu().numpy(), result.log_probs.cpu().numpy())))
        for name, values in (extra_columns or {}).items():
            columns[name] = values[rows]
        writer.write_batch(rows.start, columns, in_order=batches is None)
        if on_commit is not None:
            on_commit(rows.start, columns)
        bar.update(rows.stop - rows.start)
    bar.close()
    return writer


@dataclass(frozen=True, eq=False)
class PoolSampling:
    """How a sampling stage fills its pool (explore, regenerate, the audit, the evaluation): the same value in every
    process that builds it from the run directory, so any process can sample any batches of it."""

    path: Path
    prompts: list[str]
    prompt_index: np.ndarray  # per row
    seeds: np.ndarray  # per row
    steps: int
    batch_size: int
    keep_latents: bool
    attrs: dict
    desc: str
    model: Callable  # (ctx, backbone) -> the transformer that samples
    extra_columns: dict[str, np.ndarray] | None = None
    guidance: float | None = None  # None = guidance.rollout
    sde: bool = True  # a rollout: the objective's SDE when it has one (the evaluation: false, the ODE)
    keep_trajectory: bool = False  # store the SDE window's latents and log-probabilities per row
    # (ctx, backbone) -> the backbone it samples on (its schedule; explore's sibling view); None = backbone
    sampling_backbone: Callable | None = None
    sources: list[Sources] | None = None  # per prompt, an edit prompt's source images (None: text-to-image)
    decode: DecodePlan | None = None  # the explore's cheaper decode (None: the full decode)

    @property
    def n_rows(self) -> int:
        return len(self.seeds)

    @property
    def row_prompts(self) -> list[str]:
        return [self.prompts[i] for i in self.prompt_index]

    def on(self, ctx, backbone):
        """The backbone whose schedule the rows are sampled on."""
        return backbone if self.sampling_backbone is None else self.sampling_backbone(ctx, backbone)

    def open(self, ctx, backbone, create: bool = True) -> CandidateWriter:
        return open_pool(self.path, self.on(ctx, backbone), self.prompts, self.n_rows, self.steps, self.batch_size,
                         self.keep_latents, self.attrs, self.extra_columns, ctx, create=create, guidance=self.guidance,
                         sde=self.sde, keep_trajectory=self.keep_trajectory, sources=self.sources)

    def sample(self, ctx, backbone, batches: range | None = None, on_commit=None, desc: str | None = None):
        """`sample_into_pool` with these settings: every batch not done yet, or those of `batches` (a shard)."""
        transformer = compiled_copy(self.model(ctx, backbone), ctx.cfg.model)  # model.compile
        return sample_into_pool(self.path, self.on(ctx, backbone), transformer, self.prompts, self.prompt_index,
                                self.seeds, self.steps, self.batch_size, self.keep_latents, self.attrs,
                                ctx.progress, desc or self.desc, self.extra_columns, on_commit, ctx, batches,
                                self.guidance, self.sde, self.keep_trajectory, sources=self.sources,
                                decode=self.decode)

    # ---- split over devices (solrl_core/stages/shards.py) ------------------------------------------------------
    bar_unit = "img"

    @property
    def unit(self) -> int:
        return self.batch_size

    def rows_done(self) -> int | None:
        """Rows of the batches marked done so far by any process (None while the pool cannot be read)."""
        try:
            return CandidateWriter(self._group("r")).rows_done()
        except (KeyError, ValueError, OSError, zarr.errors.BaseZarrError):
            return None

    def prepare(self, ctx) -> None:
        """Create the pool (or keep the one a previous attempt left) before the shards write into it."""
        from solrl_core.models.backbones.cache import load_backbone

        self.open(ctx, load_backbone(ctx.cfg))

    def run_shard(self, ctx, shard) -> tuple[dict, None]:
        """Sample the batches of `shard` that are not done yet; return what it did."""
        from solrl_core.models.backbones.cache import load_backbone

        try:
            todo = CandidateWriter(self._group("r")).pending(shard.batches)
        except (KeyError, ValueError, OSError, zarr.errors.BaseZarrError):
            raise SolrlError(f"the pool {self.path} does not exist yet: it is prepared before the shards") from None
        writer = self.sample(ctx, load_backbone(ctx.cfg), shard.batches, desc=f"{self.desc} shard {shard.index}")
        left = writer.pending(shard.batches)
        return {"sampled": len(todo) - len(left), "left": len(left)}, None

    def finished(self) -> bool:
        """Whether an earlier attempt already sampled every batch of this pool (nothing to start)."""
        try:
            writer = CandidateWriter(self._group("r+"))
        except (KeyError, ValueError, OSError, zarr.errors.BaseZarrError):
            return False
        return writer.n_rows == self.n_rows and writer.batch_size == self.batch_size and not writer.pending()

    def collect(self, ctx, reports: list[dict]) -> CandidateWriter:
        """The complete pool's writer, its `committed` count brought up to date; an error if a batch is missing."""
        writer = CandidateWriter(self._group("r+"))
        if writer.sync_committed() < writer.n_rows:
            left = writer.pending()
            stage = self.path.parent.name.removesuffix(".partial")
            raise SolrlError(f"{stage} of iteration {ctx.iteration}: {len(left)} of {writer.n_batches} batches are "
                             f"not done after its {len(reports)} shards ran (first: batch {left[0]}); run the stage "
                             "again to finish them")
        return writer

    def _group(self, mode: str):
        return zarr.open_group(zarr_store(self.path), mode=mode)
