"""Refuse, before any weights load, a run whose stages cannot fit in its GPUs' memory.

``check_memory_fits(cfg)`` prices each stage of a CUDA run with the planner's memory model
(``solrl_core.planner.memory``: parameter counts and activations measured on the meta device, no weights; the parts of
each stage are ``MemoryEstimate.stage_parts``) as the config sets the run up, and raises a one-line ``SolrlError``
when one needs more than the GPU it runs on has. The stages: explore (and the quantize stage, which builds the same
copy) with ``explore.precision`` as it resolves on the run's GPU (``quant.backends.resolve_backend``: auto is NVFP4
on Blackwell, FP8 on Hopper / Ada), ``quant.lora_branch`` and the config's quantization rule, and with the
fidelity guardrail on, the largest of its ladder's rungs too; regenerate, when enabled; the update at
``train.micro_batch``, ``train.lora_rank`` and ``train.lora_targets``, with or without
``model.gradient_checkpointing``, at the config's resolution and text length; the evaluation, when ``eval.every``
is set; the audit, when ``audit.every`` is. Text encoders count unless ``model.release_text_encoders``;
``model.dtype`` sets the bytes of the weights. An explore sibling (``explore.sibling.path``) stays loaded beside W0 in
every stage of a device worker: its transformer's weights count in each (``sibling_model_of``).

Each sampling stage also holds its batch's activations (``sampling_batches``: ``explore.batch_size``,
``regenerate.batch_size``, ``eval.batch_size``, doubled under classifier-free guidance; ``memory.sampling_bytes`` a
sample). What the memory model leaves out — VAE decoding (``model.decode_chunk``), the low-precision layers' own
temporaries — is not checked: the check refuses configs that cannot fit, it does not promise that the others do.
The evaluation's reward models are loaded for the evaluation and released after it (``rewards.registry.
release_rewards``): they never sit beside a training stage.

Only a backbone the planner has a full-size model of is checked (``memory_model_of``): not the embedded model, a
plug-in kind, or a local ``model.path`` whose transformer config differs from the full-size one (a tiny model from
``solrl make-tiny``): the planner has no estimate for those short of loading them. A hub id is taken to be the
official checkpoint (its cached config is compared when the hub cache has it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from solrl_core.errors import SolrlError

if TYPE_CHECKING:
    from solrl_core.planner.explore_copy import ExploreBackend, ExploreCopy

# Headroom kept free on every GPU for what no estimate counts: the CUDA context (~0.5-1 GiB with lazy module
# loading), cuBLAS/cuDNN workspaces and NCCL buffers, and the caching allocator's rounding and fragmentation. A fixed
# amount, not a fraction: none of these grows with the card. 2 GiB is the low end of the memory model's own "add
# ~2-4 GiB", so that a refusal means the run cannot fit, not that it might not.
MARGIN_GIB = 2.0

_PARTS = {"weights": "W0", "quantized": "quantized layers", "merged": "merged LoRA layers",
          "lora": "LoRA training state", "adapters": "LoRA adapters", "text_encoders": "text encoders", "vae": "VAE",
          "reward": "reward model", "activations": "activations", "sibling": "explore sibling",
          "sampling": "sampling batch", "full_state": "full training state (per rank)",
          "gathered": "gathered blocks", "policy": "θ_old's whole copy"}


@dataclass(frozen=True)
class StageMemory:
    """One stage's estimated peak per GPU, in GiB, by part (``_PARTS``); ``precision``: the explore copy's."""

    stage: str
    parts: dict[str, float]
    precision: str = ""

    @property
    def gib(self) -> float:
        return sum(self.parts.values())

    def describe(self) -> str:
        def label(key: str) -> str:
            return f"layers in {self.precision}" if key == "quantized" and self.precision else _PARTS.get(key, key)

        return " + ".join(f"{label(k)} {v:.1f}" for k, v in self.parts.items() if v >= 0.05)


# ---------------------------------------------------------------------------------------------- the model priced


def _transformer_config(path: str) -> dict | None:
    """The transformer's config.json of a local diffusers directory, or of a hub id already in the hub cache; None
    when neither has one."""
    local = Path(path).expanduser()
    if local.exists():
        file = local / "transformer" / "config.json"
        return json.loads(file.read_text()) if file.is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(path, "transformer/config.json")
    except ValueError:  # not a valid repo id (HFValidationError): the backbone's load names the problem
        return None
    return json.loads(Path(cached).read_text()) if isinstance(cached, str) else None


def _same_architecture(found: dict, full_size: dict) -> bool:
    """The settings both configs name (diffusers' own ``_`` keys aside) are equal."""
    shared = {k for k in found if not k.startswith("_")} & {k for k in full_size if not k.startswith("_")}
    return bool(shared) and all(found[k] == full_size[k] for k in shared)


def memory_model_of(cfg) -> str | None:
    """The planner model (``memory.SPECS`` key) whose memory the run's backbone has, or None (module docstring)."""
    from solrl_core.models.model_configs import config_dir
    from solrl_core.planner.flops import planner_model
    from solrl_core.planner.memory import SPECS
    from solrl_core.plugins import is_plugin

    if is_plugin(cfg.model.kind) or not cfg.model.path:
        return None
    same_kind = [k for k, spec in SPECS.items() if spec.kind == cfg.model.kind]
    if not same_kind:
        return None
    named = planner_model(cfg)
    found = _transformer_config(cfg.model.path)
    if found is None:  # a hub id, not in the cache: the official checkpoint (as `solrl plan CONFIG` prices it)
        return named if named in SPECS else None
    for key in sorted(same_kind, key=lambda k: k != named):
        if _same_architecture(found, json.loads((config_dir() / SPECS[key].config_file).read_text())):
            return key
    return None


def sibling_model_of(cfg, model: str) -> str:
    """The planner model whose transformer the explore sibling has: its config matched as ``memory_model_of`` matches
    the run's (SD3.5 Medium beside SD3.5 Large), else ``model``, the run's own (a step-distilled sibling of the same
    architecture, or one whose config cannot be read)."""
    sibling = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": cfg.explore.sibling.path})})
    return memory_model_of(sibling) or model


def config_tokens(cfg, model: str) -> tuple[int | None, int | None]:
    """One sample's (image, text) tokens at the config's resolution, frames and text length; None where it is the
    official one (the measurement the planner already has)."""
    from solrl_core.planner.memory import SPECS

    spec = SPECS[model]
    d = spec.defaults
    resolution, length = cfg.model.resolution or d.resolution, cfg.model.max_sequence_length
    latent_frames = spec.latent_frames_at(cfg.model.frames)
    image = text = None
    if resolution != d.resolution or latent_frames != spec.latent_frames:  # tokens grow with the area and frames
        side = math.isqrt(spec.image_tokens // spec.latent_frames)
        image = round(side * resolution / d.resolution) ** 2 * latent_frames
    if length and d.max_sequence_length and length != d.max_sequence_length:
        text = spec.text_tokens - d.max_sequence_length + length  # SD3: CLIP's 77 tokens stay
    return image, text


def explore_copies(cfg, backend: ExploreBackend | None = None) -> list[ExploreCopy]:
    """The explore copies a run may build: ``explore.precision`` as ``backend`` (default: resolved on the run's
    device), then, with the fidelity guardrail on, each precision of its ladder (those this machine cannot run are
    left out: the run would stop there anyway)."""
    from solrl_core.planner.explore_copy import ExploreCopy, backend_on_device

    ex, quant = cfg.explore, cfg.quant
    configured = backend if backend is not None else backend_on_device(ex.precision, cfg.model.device)
    backends = [configured]
    if ex.guardrail.enabled and cfg.regenerate.enabled:
        for precision, _steps in ex.guardrail.ladder:
            try:
                rung = configured if precision == configured.name else backend_on_device(precision, cfg.model.device)
            except SolrlError:
                continue
            backends.append(rung)
    skip = tuple(quant.skip_names) if quant.skip_names is not None else None
    return [ExploreCopy(b, quant.lora_branch, skip, quant.min_width) for b in dict.fromkeys(backends)]


def _estimate(cfg, model: str, explore: ExploreCopy, **changes):
    """The memory model's estimate of ``model`` as ``cfg`` runs it with the explore copy ``explore``; ``changes``
    replace the config's settings (micro_batch, text_encoders_resident, gradient_checkpointing) to price a remedy."""
    from solrl_core.planner.samples import full_size_latent, update_samples_bytes
    from solrl_core.planner.memory import memory_estimate

    image, text = config_tokens(cfg, model)
    settings = dict(micro_batch=cfg.train.micro_batch, text_encoders_resident=not cfg.model.release_text_encoders,
                    gradient_checkpointing=cfg.model.gradient_checkpointing,
                    samples_bytes=update_samples_bytes(cfg, full_size_latent(model, cfg.model.resolution,
                                                                                cfg.model.frames)))
    settings["sampling_batches"] = sampling_batches(cfg, model)
    settings.update(adapter=cfg.train.adapter, processes=cfg.train.processes * cfg.train.nodes)
    settings.update(changes)
    targets = tuple(cfg.train.lora_targets) if cfg.train.lora_targets else None
    experts = tuple(cfg.train.experts) if cfg.train.experts else None
    return memory_estimate(model, lora_rank=cfg.train.lora_rank, lora_targets=targets, image_tokens=image,
                           text_tokens=text, dtype=cfg.model.dtype, explore=explore, trained_experts=experts,
                           **settings)


def sampling_batches(cfg, model: str) -> dict[str, int]:
    """Samples per transformer forward of each sampling stage of ``cfg`` on the planner's ``model``: its batch size,
    twice it under classifier-free guidance (the unconditional half rides in the same forward)."""
    from solrl_core.planner.flops import get_model
    from solrl_core.models.backbones.registry import backbone_spec

    distilled = backbone_spec(get_model(model).backbone).defaults.distilled_guidance

    def per_forward(batch: int, guidance: float) -> int:
        return batch * (2 if guidance != 1.0 and not distilled else 1)

    rollout, regenerate = cfg.guidance.rollout, cfg.regenerate.batch_size
    return {"explore": per_forward(cfg.explore.batch_size, rollout), "regenerate": per_forward(regenerate, rollout),
            "audit": per_forward(regenerate, rollout), "evaluation": per_forward(cfg.eval.batch_size, cfg.guidance.eval)}


def _stages(cfg, model: str, copies: list[ExploreCopy], lora_branch: bool | None = None,
            **changes) -> list[StageMemory]:
    """The stages the run has, priced (module docstring): the explore stage with the largest of ``copies``
    (``lora_branch``: priced with it set instead, a remedy), the others from the first."""
    if lora_branch is not None:
        copies = [replace(c, lora_branch=lora_branch) for c in copies]
    estimates = [_estimate(cfg, model, c, **changes) for c in copies]
    parts = estimates[0].stage_parts()
    explore = [(e.stage_parts()["explore"], c.backend.describe()) for e, c in zip(estimates, copies)]
    explore_parts, precision = max(explore, key=lambda pair: sum(pair[0].values()))
    runs = {"explore": True, "regenerate": cfg.regenerate.enabled, "update": True, "evaluation": bool(cfg.eval.every),
            "audit": bool(cfg.audit.every)}
    sibling = {}
    if cfg.explore.sibling.path is not None:
        from solrl_core.models.backbones.diffusers_pipeline import DTYPES
        from solrl_core.planner.memory import GIB, transformer_params

        sibling = {"sibling": transformer_params(sibling_model_of(cfg, model)) * DTYPES[cfg.model.dtype].itemsize / GIB}
    return [StageMemory("explore", {**explore_parts, **sibling}, precision) if stage == "explore"
            else StageMemory(stage, {**parts[stage], **sibling}) for stage, present in runs.items() if present]


def stage_memory(cfg, explore_backend: ExploreBackend | None = None) -> list[StageMemory] | None:
    """Each stage of the run with its estimated peak per GPU; None when the planner has no model of its backbone.
    ``explore_backend``: ``explore.precision`` resolved (default: on the run's device)."""
    model = memory_model_of(cfg)
    return None if model is None else _stages(cfg, model, explore_copies(cfg, explore_backend))


# ---------------------------------------------------------------------------------------------- the GPUs


def _gpu_index(device: str) -> int:
    import torch

    dev = torch.device(device)
    return torch.cuda.current_device() if dev.index is None else dev.index


def gpu_memory(cfg) -> tuple[str, int] | None:
    """(name, total bytes) of the smallest GPU the run uses: those sampling and scoring run on (``orchestration.
    devices``, or every visible GPU / model.device for auto), and the update's (``train.processes`` ranks on GPUs
    0..processes-1, or model.device); None when CUDA is not available."""
    import torch

    from solrl_core.placement import resolve_devices

    if not torch.cuda.is_available():
        return None
    devices = [d for d in resolve_devices(cfg) if d != "cpu"] + [cfg.model.device]
    if cfg.train.processes > 1:
        devices += [f"cuda:{r}" for r in range(cfg.train.processes)]
    props = {i: torch.cuda.get_device_properties(i) for i in sorted({_gpu_index(d) for d in devices})}
    smallest = min(props, key=lambda i: (props[i].total_memory, i))
    return f"cuda:{smallest} ({props[smallest].name})", props[smallest].total_memory


# ---------------------------------------------------------------------------------------------- the check


def _is_cuda(device: str) -> bool:
    return str(device).split(":")[0] == "cuda"


def _remedy(cfg, model: str, copies: list[ExploreCopy], stage: str, limit_gib: float) -> str:
    """What to change so that ``stage`` fits under ``limit_gib``: the first single change that does (the most
    effective first), else all of them together, else the GPU memory needed even with them."""
    def gib(**changes) -> float:
        return next(s.gib for s in _stages(cfg, model, copies, **changes) if s.stage == stage)

    options: list[tuple[str, dict]] = []
    if stage == "explore" and not cfg.quant.lora_branch and cfg.train.adapter == "lora":
        options.append(("quant.lora_branch: true", dict(lora_branch=True)))
    ranks = cfg.train.processes * cfg.train.nodes
    if stage == "update" and cfg.train.adapter == "full" and ranks < 8:
        options.append(("train.processes: 8 (the full training state sharded over 8 GPUs)",
                        dict(processes=8 * cfg.train.nodes)))
    if stage == "update" and not cfg.model.gradient_checkpointing:
        options.append(("model.gradient_checkpointing: true", dict(gradient_checkpointing=True)))
    if stage == "update" and cfg.train.micro_batch > 1:
        fitting = [mb for mb in range(cfg.train.micro_batch - 1, 0, -1) if gib(micro_batch=mb) <= limit_gib]
        mb = fitting[0] if fitting else 1
        options.append((f"train.micro_batch: {mb}", dict(micro_batch=mb)))
    if not cfg.model.release_text_encoders:
        options.append(("model.release_text_encoders: true", dict(text_encoders_resident=False)))
    for key, change in options:
        if gib(**change) <= limit_gib:
            return f"set {key} (~{gib(**change):.1f} GiB)"
    everything = {k: v for _, change in options for k, v in change.items()}
    with_all = gib(**everything)
    keys = " and ".join(key for key, _ in options)
    if options and with_all <= limit_gib:
        return f"set {keys} (~{with_all:.1f} GiB)"
    tried = f"even with {keys} it needs ~{with_all:.1f} GiB: " if options else ""
    extra = "; or turn the evaluation off (eval.every: 0)" if stage == "evaluation" else ""
    return f"{tried}run it on GPUs with at least {math.ceil(with_all + MARGIN_GIB)} GiB{extra}"


def fit_on_card(cfg, memory_gib: float, explore_backend: ExploreBackend | None = None) -> dict | None:
    """Whether every stage of `cfg` fits in `memory_gib` per GPU less MARGIN_GIB (what `solrl plan` says of a card):
    {"fits", "memory_gib", "stage" (the largest), "gib"}, and where it does not, "over_gib" and "remedy" (the change
    that makes it fit, `_remedy`). None for a backbone the planner has no full-size model of."""
    model = memory_model_of(cfg)
    if model is None:
        return None
    copies = explore_copies(cfg, explore_backend)
    worst = max(_stages(cfg, model, copies), key=lambda s: s.gib)
    limit = memory_gib - MARGIN_GIB
    verdict = {"fits": worst.gib <= limit, "memory_gib": memory_gib, "stage": worst.stage, "gib": worst.gib}
    if not verdict["fits"]:
        verdict["over_gib"] = worst.gib + MARGIN_GIB - memory_gib
        verdict["remedy"] = _remedy(cfg, model, copies, worst.stage, limit)
    return verdict


def check_memory_fits(cfg, device_memory_bytes: int | None = None,
                      explore_backend: ExploreBackend | None = None) -> list[StageMemory] | None:
    """Raise a one-line SolrlError when a stage of a CUDA run needs more memory per GPU than the GPU has, less
    ``MARGIN_GIB`` (naming the stage, its estimate, the GPU's memory, the excess and the setting to change).
    ``device_memory_bytes``: the GPU's memory (default: ``gpu_memory(cfg)``, asked of torch.cuda);
    ``explore_backend``: ``explore.precision`` resolved (default: ``quant.backends.resolve_backend`` on the run's
    device). Loads no weights. Returns the stages priced, or None when nothing was checked: a CPU run, no CUDA, or
    a backbone the planner has no full-size model of (module docstring)."""
    if not _is_cuda(cfg.model.device):
        return None
    model = memory_model_of(cfg)
    if model is None:
        return None
    if device_memory_bytes is None:
        found = gpu_memory(cfg)
        if found is None:
            return None
        device, device_memory_bytes = found
    else:
        device = "the GPU"
    from solrl_core.planner.memory import GIB, SPECS

    copies = explore_copies(cfg, explore_backend)
    stages = _stages(cfg, model, copies)
    memory_gib = device_memory_bytes / GIB
    limit = memory_gib - MARGIN_GIB
    over = [s for s in stages if s.gib > limit]
    if not over:
        return stages
    worst = max(over, key=lambda s: s.gib)
    others = [s for s in over if s is not worst]
    also = f" (also over: {', '.join(f'{s.stage} ~{s.gib:.1f} GiB' for s in others)})" if others else ""
    raise SolrlError(
        f"{SPECS[model].title}'s {worst.stage} stage needs ~{worst.gib:.1f} GiB per GPU ({worst.describe()}; the "
        f"planner's estimate) + {MARGIN_GIB:.0f} GiB kept free for the CUDA context, but {device} has "
        f"{memory_gib:.1f} GiB: "
        f"{worst.gib + MARGIN_GIB - memory_gib:.1f} GiB over{also}; {_remedy(cfg, model, copies, worst.stage, limit)}")
