"""What a run writes to its run directory, by artifact: bytes per iteration, per evaluation, per audit and once.

Uncompressed sizes of the arrays and tensors written (zarr arrays' ``nbytes``, the safetensors files' tensor data):
an upper bound on the disk they take, since zarr compresses the uint8 images somewhat (the float32 latents barely).
Per iteration (``solrl_core/stages``):

* explore pool    — ``explore/pool.zarr`` (``pool.CandidateWriter``): per candidate its image (uint8 H × W × 3),
                    ``prompt_index`` (int32), ``seed`` (int64) and, when ``explore.keep_latents`` or regenerate is
                    off, its final latent (float32); one ``batch_done`` byte per sampling batch;
* regenerate      — ``regenerate/samples.zarr``: per selected candidate its image and latent, ``prompt_index``,
                    ``seed`` and ``candidate_index`` (int64), regenerated or, with regenerate off, copied from the
                    pool; for an objective that trains on SDE trajectories (Flow-GRPO) also the window's latents
                    (W + 1 float32 latents for a window of W steps) and W float32 log-probabilities (then the
                    explore pool keeps them too when regenerate is off);
* rewards         — ``score_explore`` / ``score_final`` ``rewards.zarr`` (float32 per row: the weighted reward, each
                    training reward, and the proxy beside the final one), ``select/selection.zarr`` (int64 per
                    selected, bool per candidate) and, with ``score.overlap``, the ``scores.zarr`` beside the pools
                    (float64 per row and reward);
* checkpoint      — ``update/checkpoint``: ``adapters.safetensors`` (θ and θ_old), ``ema.safetensors`` and
                    ``optimizer.safetensors`` (AdamW's exp_avg and exp_avg_sq, and a float32 step per tensor), all
                    float32, the LoRA at the run's rank and targets.

Every ``eval.every`` iterations (and before training, and after the last iteration) the evaluation writes
``eval/step_N/pool.zarr`` (``eval.num_prompts`` × ``eval.seeds_per_prompt`` images, no latents); every
``audit.every`` iterations the audit writes ``audit/pool.zarr`` (the whole explore pool again, no latents) and its
``rewards.zarr``. Once per run: ``init/adapters.safetensors`` and the text cache (``text_cache/``: one file per
prompt encoded, its conditioning without the batch dimension; at most the prompts the run can draw; for a full-size
model its text embeddings and pooled vector in ``model.dtype``, the attention masks of SANA and Qwen-Image,
under 0.2 %, left out). Not counted:
JSON files (manifests, reports, ``state.json``, ``metrics.json``), the PNG grids and the safetensors headers — a
few kB to a few MB per iteration. No merged weights are written (the quantize stage writes its report only).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from types import SimpleNamespace

from solrl_core.planner.samples import LATENT, full_size_latent, kept_samples, trained_window_steps

IMAGE, INDEX, SEED, CANDIDATE, DONE = 1, 4, 8, 8, 1  # bytes per value: uint8, int32, int64, int64, uint8
# (pool.CandidateWriter.open; a latent's float32: samples.LATENT)
REWARD, SCORE, SELECTED = 4, 8, 1  # float32 rewards tables, float64 scores.zarr, bool selection mask
TENSOR = 4  # float32: θ, θ_old, the EMA and AdamW's state (rl.policy.MASTER_DTYPE)
OPTIMIZER_MOMENTS = 2  # AdamW: exp_avg and exp_avg_sq per parameter (and one 0-dim step per tensor)


@dataclass(frozen=True)
class SampleShapes:
    """What one candidate, one adapter and one prompt of a run look like on disk."""

    image: tuple[int, ...]  # (H, W, 3) uint8; a video's (frames, H, W, 3)
    latent: tuple[int, ...]  # one sample's latent, stored in float32
    lora_params: int  # one adapter at the run's rank and targets
    lora_tensors: int  # tensors of one adapter (A and B of each targeted layer)
    conditioning_bytes: int  # one prompt's text-cache entry (its tensors' data)


def full_size_shapes(cfg, model: str, official: bool = False) -> SampleShapes:
    """A full-size model's shapes on the meta device: the config's resolution, text length, LoRA rank and targets
    (``official``: the model's own resolution and text length and official targets, for a config priced on another
    backbone)."""
    import torch

    from solrl_core.models.model_configs import config_dir
    from solrl_core.planner.explore_copy import targeted_linears
    from solrl_core.planner.fits import config_tokens
    from solrl_core.planner.flops import example_inputs
    from solrl_core.planner.memory import DTYPES, SPECS, expert_counts, lora_params, plain_transformer

    spec = SPECS[model]
    d = spec.defaults
    resolution = d.resolution if official or not cfg.model.resolution else cfg.model.resolution
    text_tokens = None if official else config_tokens(cfg, model)[1]
    targets = tuple(d.lora_targets) if official or not cfg.train.lora_targets else tuple(cfg.train.lora_targets)
    frames = d.frames if official or not cfg.model.frames else cfg.model.frames  # None: an image model
    latent = full_size_latent(model, resolution, frames)
    config = json.loads((config_dir() / spec.config_file).read_text())
    inputs = example_inputs(spec.kind, config, spec.image_tokens, text_tokens or spec.text_tokens)
    size = DTYPES[cfg.model.dtype].itemsize
    conditioning = sum(inputs[k][0].numel() * size for k in ("encoder_hidden_states", "pooled_projections")
                       if torch.is_tensor(inputs.get(k)))
    module = plain_transformer(model)
    image = (resolution, resolution, 3) if frames is None else (frames, resolution, resolution, 3)
    _, trained = expert_counts(model, None if official or not cfg.train.experts else tuple(cfg.train.experts))
    return SampleShapes(image=image, latent=latent,
                        lora_params=lora_params(module, targets, cfg.train.lora_rank) * trained,
                        lora_tensors=2 * len(targeted_linears(module, targets)) * trained,
                        conditioning_bytes=conditioning)


def backbone_shapes(cfg, backbone) -> SampleShapes:
    """A loaded backbone's shapes (the embedded model, a tiny one): its decoder's image, its latent, the LoRA on its
    transformer, one prompt's conditioning as the text cache stores it."""
    import torch

    from solrl_core.planner.explore_copy import targeted_linears
    from solrl_core.planner.memory import lora_params
    from solrl_core.prompts import CALIBRATION_PROMPT

    from solrl_core.stages.checkpoints import lora_target_modules

    image = tuple(backbone.decode(torch.zeros(1, *backbone.latent_shape)).shape[1:])
    targets = tuple(lora_target_modules(cfg, backbone))  # a model of experts: the trained experts' layers
    cond = backbone.encode_prompts([CALIBRATION_PROMPT])
    return SampleShapes(image=image, latent=tuple(backbone.latent_shape),
                        lora_params=lora_params(backbone.transformer, targets, cfg.train.lora_rank),
                        lora_tensors=2 * len(targeted_linears(backbone.transformer, targets)),
                        conditioning_bytes=sum(t[0].numel() * t.element_size() for t in cond.values()))


def sample_shapes(cfg, model: str | None = None) -> SampleShapes:
    """The run's shapes: of its full-size model on the meta device (``fits.memory_model_of``), else of its loaded
    backbone; ``model``: a full-size model to price the config on instead (its official resolution)."""
    from solrl_core.planner.fits import memory_model_of

    if model is not None:
        return full_size_shapes(cfg, model, official=model != memory_model_of(cfg))
    full = memory_model_of(cfg)
    if full is not None:
        return full_size_shapes(cfg, full)
    from solrl_core.models.backbones.cache import load_backbone

    return backbone_shapes(cfg, load_backbone(cfg))


# ---------------------------------------------------------------------------------------------- the estimate


def pool_bytes(rows: int, shapes: SampleShapes, latents: bool, batch_size: int | None,
               candidate_index: bool = False, sde_steps: int = 0) -> int:
    """A sampled pool (``pool.CandidateWriter``; ``batch_size`` None: written whole, no batch markers). `sde_steps`:
    the length of the SDE window whose latents (one more than its steps) and log-probabilities each row keeps (an
    objective that trains on trajectories, Flow-GRPO)."""
    per_row = IMAGE * math.prod(shapes.image) + INDEX + SEED + (CANDIDATE if candidate_index else 0)
    if latents:
        per_row += LATENT * math.prod(shapes.latent)
    if sde_steps:
        per_row += LATENT * (sde_steps + 1) * math.prod(shapes.latent) + LATENT * sde_steps
    return rows * per_row + (DONE * -(-rows // batch_size) if batch_size else 0)


def checkpoint_bytes(shapes: SampleShapes) -> dict[str, int]:
    """The update's checkpoint files' tensor data (``stages.update._save_checkpoint``)."""
    lora = shapes.lora_params
    return {"adapters": 2 * TENSOR * lora, "ema": TENSOR * lora,
            "optimizer": OPTIMIZER_MOMENTS * TENSOR * lora + TENSOR * shapes.lora_tensors}


@dataclass(frozen=True)
class DiskEstimate:
    """Bytes written to the run directory (module docstring), by artifact."""

    per_iteration: dict[str, int]
    per_evaluation: dict[str, int]
    per_audit: dict[str, int]
    once: dict[str, int]
    iterations: int
    evaluations: int
    audits: int

    @property
    def iteration_bytes(self) -> int:
        return sum(self.per_iteration.values())

    @property
    def run_bytes(self) -> int:
        """Everything the run's iterations, evaluations and audits write, and what is written once."""
        return (self.iterations * self.iteration_bytes + self.evaluations * sum(self.per_evaluation.values())
                + self.audits * sum(self.per_audit.values()) + sum(self.once.values()))

    def to_dict(self) -> dict:
        return {**asdict(self), "iteration_bytes": self.iteration_bytes, "run_bytes": self.run_bytes}

    @classmethod
    def from_dict(cls, d: dict) -> DiskEstimate:
        """Back from ``to_dict`` (the totals it adds are recomputed)."""
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


def evaluation_count(cfg) -> int:
    """Evaluations of a run: before training, every ``eval.every`` iterations and after the last
    (flows/training.py)."""
    every, n = cfg.eval.every, cfg.iterations
    return 0 if not every else 1 + n // every + (1 if n % every else 0)


def audit_count(cfg) -> int:
    """Audits of a run: the iterations `stages.audit.audit_due` audits."""
    from solrl_core.stages.audit import audit_due

    return sum(audit_due(cfg, i) for i in range(cfg.iterations))


def _encoded_prompts(cfg, distilled_guidance: bool) -> int:
    """At most how many prompts the run encodes into its text cache (``text_cache.run_prompts``): the training
    prompts it can draw (all of them with ``model.release_text_encoders``), the evaluated ones, the calibration
    prompt and the empty prompt when guidance needs it (an editing model's, once per edit prompt a guided phase
    samples: its unconditional branch sees the source). A training set that cannot be read counts as P × iterations."""
    from solrl_core.errors import SolrlError
    from solrl_core.models.backbones.registry import edits_images
    from solrl_core.prompts import train_prompt_set
    from solrl_core.models.text_cache import needs_uncond

    drawn = cfg.prompts.per_iteration * cfg.iterations
    try:
        train = len(train_prompt_set(cfg))
    except (SolrlError, OSError):
        train = drawn
    train = train if cfg.model.release_text_encoders else min(train, drawn)
    evaluated = cfg.eval.num_prompts if cfg.eval.every else 0
    uncond = needs_uncond(cfg, SimpleNamespace(defaults=SimpleNamespace(distilled_guidance=distilled_guidance)))
    if uncond and edits_images(cfg.model):
        return (train + evaluated + 1 + train * (cfg.guidance.rollout != 1.0)
                + evaluated * (cfg.guidance.eval != 1.0))
    return train + evaluated + 1 + int(uncond)


def disk_estimate(cfg, shapes: SampleShapes, distilled_guidance: bool = False) -> DiskEstimate:
    """Bytes ``cfg`` writes to its run directory (module docstring); ``distilled_guidance``: the backbone takes the
    guidance scale as an input (FLUX.1-dev), so it never encodes the empty prompt."""
    n = cfg.prompts.per_iteration * cfg.explore.seeds_per_prompt
    kept = kept_samples(cfg)
    rewards = len(cfg.rewards)
    regen = cfg.regenerate.enabled
    keep_latents = cfg.explore.keep_latents or not regen
    sde_steps = trained_window_steps(cfg)
    tables = (n * REWARD * (1 + rewards) + kept * CANDIDATE + n * SELECTED
              + kept * REWARD * (2 + (rewards if regen else 0)))
    if cfg.score.overlap:  # scored while sampled (one device): scores.zarr beside the explore and regenerate pools
        tables += SCORE * rewards * (n + (kept if regen else 0))
    per_iteration = {
        "explore pool": pool_bytes(n, shapes, keep_latents, cfg.explore.batch_size, sde_steps=0 if regen else sde_steps),
        "regenerate samples": pool_bytes(kept, shapes, True, cfg.regenerate.batch_size if regen else None, True,
                                         sde_steps),
        "rewards and selection": tables,
        "checkpoint": sum(checkpoint_bytes(shapes).values()),
    }
    evaluation = {"evaluation pool": pool_bytes(cfg.eval.num_prompts * cfg.eval.seeds_per_prompt, shapes, False,
                                                cfg.eval.batch_size)}
    audit = {"audit pool": pool_bytes(n, shapes, False, cfg.regenerate.batch_size, True),
             "audit rewards": n * REWARD * (2 + rewards)}
    once = {"text cache": _encoded_prompts(cfg, distilled_guidance) * shapes.conditioning_bytes,
            "initial adapters": checkpoint_bytes(shapes)["adapters"]}
    return DiskEstimate(per_iteration, evaluation, audit, once, cfg.iterations, evaluation_count(cfg),
                        audit_count(cfg))


def run_disk(cfg, model: str | None = None) -> DiskEstimate:
    """``disk_estimate`` of a run config, its shapes from ``sample_shapes`` (``model``: priced on that backbone)."""
    from solrl_core.models.backbones.registry import backbone_specs

    specs = [s for s in backbone_specs() if (s.key == model if model else s.kind == cfg.model.kind)]
    distilled = bool(specs) and specs[0].defaults.distilled_guidance  # a plug-in kind: not known, counted
    return disk_estimate(cfg, sample_shapes(cfg, model), distilled)


# ---------------------------------------------------------------------------------------------- text


def _size(n: float) -> str:
    """Decimal units, as disks are sold."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def format_disk(est: DiskEstimate) -> str:
    """One short section: per iteration by artifact, over the run, and what evaluations, audits and the run's once
    cost add."""
    parts = ", ".join(f"{name} {_size(b)}" for name, b in est.per_iteration.items())
    lines = [f"run directory: ~{_size(est.iteration_bytes)} per iteration ({parts}), ~{_size(est.run_bytes)} over "
             f"the run's {est.iterations} iterations"]
    extra = []
    if est.evaluations:
        extra.append(f"{est.evaluations} evaluations of {_size(sum(est.per_evaluation.values()))}")
    if est.audits:
        extra.append(f"{est.audits} audits of {_size(sum(est.per_audit.values()))}")
    extra.append(f"text cache up to {_size(est.once['text cache'])} once")
    lines.append(f"  including {', '.join(extra)}; uncompressed (zarr compresses the images somewhat), JSON and PNG "
                 "files not counted")
    return "\n".join(lines)
