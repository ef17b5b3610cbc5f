"""The backbone specs (`solrl_core.models.backbones.specs`, one module per model) and `model.kind` -> adapter class.

`model.kind` is either the kind of a spec ("flux1", "sd35", ...) or "package.module:Class" naming a
`solrl_core.models.backbones.base.Backbone` subclass that lives elsewhere (a plug-in: nothing here changes for it, but an
exception of its code is one line naming it, solrl_core/plugins.py). Adapters are imported when asked for, so that an
unused backbone costs nothing.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import TYPE_CHECKING

from solrl_core.models.backbones.spec import BackboneSpec
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.plugins import import_plugin, is_plugin, plugin_code

if TYPE_CHECKING:
    from solrl_core.models.backbones.base import Backbone


@lru_cache(maxsize=None)
def backbone_specs() -> tuple[BackboneSpec, ...]:
    """Every spec in solrl_core.models.backbones.specs (each module's `SPEC`), in `order`."""
    from solrl_core.models.backbones import specs as package

    found = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        if isinstance(getattr(module, "SPEC", None), BackboneSpec):
            found.append(module.SPEC)
    found.sort(key=lambda s: s.order)
    keys = [s.key for s in found]
    if len(set(keys)) != len(keys):
        raise RuntimeError(f"two backbone specs share a key: {keys}")
    adapters: dict[str, str] = {}
    for s in found:
        if adapters.setdefault(s.kind, s.adapter) != s.adapter:
            raise RuntimeError(f"model.kind '{s.kind}' names two adapters: {adapters[s.kind]}, {s.adapter}")
    return tuple(found)


def full_size_models() -> list[str]:
    """The keys of the backbones with a full-size config (what the planner, coverage and gpu-bench know)."""
    return [s.key for s in backbone_specs() if s.config_file]


def backbone_spec(key: str) -> BackboneSpec:
    """The spec of model `key` (e.g. "sd35l")."""
    for s in backbone_specs():
        if s.key == key:
            return s
    raise KeyError(key)


def adapters() -> dict[str, str]:
    """model.kind -> "module:Class" of its adapter, for every kind the specs name."""
    return {s.kind: s.adapter for s in backbone_specs()}


def adapter_class(kind: str) -> type[Backbone]:
    """The adapter of a `model.kind`: a registered kind (imported now) or a plug-in's class; ConfigError (one line)
    for anything else."""
    from solrl_core.models.backbones.base import Backbone

    if is_plugin(kind):
        return import_plugin(kind, Backbone, "model.kind")
    if kind not in adapters():
        raise ConfigError(
            f"model.kind '{kind}' is not a backbone (known: {', '.join(adapters())}; or package.module:Class)"
        )
    module, _, name = adapters()[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def check_kind(kind: str) -> str:
    """`kind` if it is a registered kind or a plug-in that imports as a Backbone; ConfigError otherwise. A
    registered adapter is not imported here (config validation stays cheap)."""
    if kind not in adapters():
        adapter_class(kind)
    return kind


def specs_of_kind(kind: str) -> list[BackboneSpec]:
    """The specs whose adapter is `model.kind` `kind` (several models may share one, e.g. sd35l and sd35m); none for
    a plug-in."""
    return [s for s in backbone_specs() if s.kind == kind]


def kind_spec(kind: str) -> BackboneSpec | None:
    """The spec of a registered model kind (its first: a kind's specs share their VAE, guidance and editing layout);
    None for a plug-in kind."""
    return None if is_plugin(kind) else specs_of_kind(kind)[0]


def makes_videos(model) -> bool | None:
    """Whether `model.kind`'s samples are videos (its spec has frames); None for a plug-in kind (its spec is its own)."""
    if is_plugin(model.kind):
        return None
    return any(s.defaults.frames is not None for s in specs_of_kind(model.kind))


def edits_images(model) -> bool | None:
    """Whether `model.kind` is an editing model (its spec's `edits`); None for a plug-in kind (its adapter says)."""
    if is_plugin(model.kind):
        return None
    return any(s.edits for s in specs_of_kind(model.kind))


def resolution_problem(model) -> str | None:
    """What is wrong with `model.resolution` for its kind, from the specs and before any load, or None: not a
    multiple of the backbone's pixels per token side (`BackboneSpec.resolution_multiple`), or, for a backbone whose
    shipped weights fix the resolution (the embedded model, `fixed_resolution`), any other than theirs (the adapter
    would generate at theirs). A plug-in's kind has no spec: nothing is known here."""
    for spec in specs_of_kind(model.kind)[:1]:
        problem = frames_problem(spec, model.frames)
        if problem:
            return problem
    resolution = model.resolution
    if resolution is None:
        return None
    for spec in specs_of_kind(model.kind)[:1]:  # the specs of one kind agree (tests/unit/models/backbones/test_backbone_specs.py)
        native = spec.defaults.resolution
        if spec.fixed_resolution and model.path is None and resolution != native:
            return (f"model.resolution {resolution}: the {spec.title} model's shipped weights generate {native} px "
                    f"images only; set model.resolution: null (or {native})")
        multiple = spec.resolution_multiple
        if multiple and resolution % multiple:
            lower, upper = resolution // multiple * multiple, (resolution // multiple + 1) * multiple
            return (f"model.resolution {resolution} must be a multiple of {multiple} for model.kind {model.kind} (the "
                    f"VAE factor times the latent patch: {multiple} px per image token), e.g. "
                    f"{f'{lower} or ' if lower else ''}{upper}")
    return None


def experts_problem(cfg) -> str | None:
    """What is wrong with the expert settings (train.experts, model.low_noise_guidance) for `model.kind`, from its
    spec, or None: set for a model of one transformer, or naming an expert the model does not have; or a step cache
    on a model of experts (not supported). A plug-in's kind has no spec: nothing is known here (its adapter
    checks)."""
    if is_plugin(cfg.model.kind):
        return None
    experts = next((s.experts for s in specs_of_kind(cfg.model.kind)), ())
    if not experts:
        for key, value in (("train.experts", cfg.train.experts), ("model.low_noise_guidance",
                                                                  cfg.model.low_noise_guidance)):
            if value is not None:
                return (f"{key}: model.kind {cfg.model.kind} has one transformer, no experts (wan22 has two); remove "
                        "it")
        return None
    chosen = cfg.train.experts
    if chosen is not None and (not chosen or set(chosen) - set(experts) or len(set(chosen)) != len(chosen)):
        return (f"train.experts {chosen}: model.kind {cfg.model.kind}'s experts are {', '.join(experts)} (one, or "
                "both; null = the backbone's default)")
    if cfg.explore.cache.kind != "none":  # its hooks would extrapolate an expert's blocks over steps the other ran
        return (f"explore.cache.kind {cfg.explore.cache.kind}: a step cache is not supported on model.kind "
                f"{cfg.model.kind}'s experts ({', '.join(experts)}); set explore.cache.kind: none")
    return None


def frames_problem(spec, frames: int | None) -> str | None:
    """What is wrong with `model.frames` for the backbone of `spec`, or None: set for an image model, or a frame count
    its VAE cannot compress (1 + a multiple of its temporal compression)."""
    if frames is None:
        return None
    if spec.defaults.frames is None:
        return f"model.frames {frames}: the {spec.title} model makes images; set model.frames: null"
    step = spec.temporal_compression
    if (frames - 1) % step:
        lower = (frames - 1) // step * step + 1
        return (f"model.frames {frames} must be 1 + a multiple of {step} for {spec.title} (its VAE compresses {step} "
                f"frames into one after the first), e.g. {lower} or {lower + step}")
    return None


def check_backbone_files(model) -> None:
    """The adapter's `check_files` (a SolrlError naming what is missing), without loading anything."""
    with plugin_code(model.kind, "model.kind", "check_files"):
        adapter_class(model.kind).check_files(model)


def set_tf32(model) -> None:
    """`model.tf32`: this process's float32 matrix products and convolutions on CUDA in TensorFloat-32 (or not)."""
    import torch

    if torch.device(model.device).type == "cuda":
        precision = "tf32" if model.tf32 else "ieee"  # torch's fp32_precision API (allow_tf32 is its legacy one)
        torch.backends.cuda.matmul.fp32_precision = precision
        torch.backends.cudnn.fp32_precision = precision


def load_backbone(model) -> Backbone:
    """The adapter for a `model:` config section (solrl_core.config.schema.ModelConfig). A SolrlError when a plug-in's load
    raises (naming it) or when the loaded model generates at another resolution than `model.resolution` asks for (a
    setting that would be recorded in the run's config and not applied)."""
    set_tf32(model)
    with plugin_code(model.kind, "model.kind", "load"):
        backbone = adapter_class(model.kind).load(model)
    made = getattr(backbone, "resolution", None)
    if model.resolution is not None and made is not None and made != model.resolution:
        raise SolrlError(f"model.resolution {model.resolution}: the model at {model.path or 'its default path'} "
                         f"generates {made} px images only; set model.resolution: null (or {made})")
    return backbone
