"""FLOPs of one transformer forward of the real backbones, counted on the meta device (no weights, no memory).

The diffusers transformer of each backbone is built from its ``config.json`` (``solrl_core/models/model_configs``) under
``torch.device("meta")`` and run once on meta inputs of one sample at the official resolution inside
``torch.utils.flop_counter.FlopCounterMode``, which counts the FLOPs of matrix products (mm/addmm/bmm, attention
kernels) and convolutions by their shapes — meta tensors are enough. Counts are per sample (batch 1; every cost
here is linear in the batch) and count 2 FLOPs per multiply-add. Normalisations, activations, softmax and other
elementwise work are not counted (they are memory-bound and small next to the matmuls; the planner's utilisation
absorbs them).

The forward's FLOPs are split three ways from the counter's per-module totals:

* ``linear`` — inside ``nn.Linear`` modules;
* ``conv`` — inside convolutions (the patch embedding; in SANA also the GLUMBConv feed-forward);
* ``attention`` — the rest: the attention score and value products (and SANA's linear-attention products).

``low_precision`` is the part the explore copy runs in 4 bits: the FLOPs of the layers the project's own rule
selects (``solrl_core.models.quant.linear.eligible_linears`` with the official skip names and minimum widths, as
``solrl_core.lab.quant_coverage`` applies them, and the real-GEMM backends' shape rule). Attention products and the
kept layers stay in BF16.

SANA. diffusers' standard SANA 1600M has a convolutional feed-forward and 2240-wide attention layers, so the rule
replaces nothing in it. The official recipe runs the "LinearFFN" variant, whose feed-forward is Linear; as in the
coverage report, the planner's ``sana`` counts the feed-forward's 1×1 convolutions as the Linear layers the rule
then replaces (``sana-diffusers`` is the plain diffusers model, with no 4-bit share).

Image decoding and reward scoring, which every sampled image goes through, are counted the same way: the VAE
decoder (``AutoencoderKL`` f8c16 for FLUX.1/SD3.5, ``AutoencoderDC`` f32c32 for SANA, ``AutoencoderKLWan`` for Wan's
videos, built from their public diffusers config values below) and an analytic count of the reward model's image
tower (CLIP ViT-H/14 at 224 px, the PickScore / HPSv2.1 backbone), once per image or per frame of a video.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from solrl_core.models.backbones.registry import adapter_class, backbone_spec, backbone_specs
from solrl_core.errors import SolrlError
from solrl_core.models.model_configs import config_dir
from solrl_core.models.meta_models import ModelSpec, build_meta_model, ffn_convs_as_linear
from solrl_core.models.quant.linear import eligible_linears, fp8_shape_rule


@dataclass(frozen=True)
class PlannerModel:
    """A backbone the planner knows: its coverage spec (config file, skip names, min width, tokens), the training
    timestep fraction, the VAE that decodes its latents and the latent shape of one sample (all from the backbone's
    spec, solrl_core/models/backbones/specs/)."""

    key: str
    spec: ModelSpec
    timestep_fraction: float
    vae: str  # key of VAE_DECODERS
    latent_shape: tuple[int, ...]  # of one sample, as the VAE decoder takes it (C, H, W)
    note: str = ""
    backbone: str = ""  # key of its solrl_core.models.backbones.specs spec


def _planner_models() -> dict[str, PlannerModel]:
    """One planner model per coverage row that names one (solrl_core/models/backbones/specs/), in the specs' order."""
    out = {}
    for b in backbone_specs():
        for row in b.coverage:
            if row.planner_key:
                out[row.planner_key] = PlannerModel(row.planner_key, ModelSpec.of(b, row), b.timestep_fraction, b.vae,
                                                    b.latent_shape, row.planner_note, b.key)
    # backbones in spec order; of one backbone, the model named after it first
    return dict(sorted(out.items(), key=lambda kv: (backbone_spec(kv[1].backbone).order, kv[0] != kv[1].backbone)))


MODELS: dict[str, PlannerModel] = _planner_models()
MODEL_ALIASES = {alias: b.key for b in backbone_specs() for alias in b.aliases}


def planner_model(cfg) -> str:
    """The planner model a run config trains: of the specs of its model.kind, the one whose `path_marker` model.path
    contains ("medium": SD3.5-Medium), else the one without a marker (SD3.5-Large); a plug-in's kind as it is."""
    path = str(cfg.model.path or "").lower()
    same_kind = [s for s in backbone_specs() if s.kind == cfg.model.kind]
    named = [s.key for s in same_kind if s.path_marker and s.path_marker in path]
    default = [s.key for s in same_kind if not s.path_marker]
    return (named or default or [cfg.model.kind])[0]


def get_model(name: str) -> PlannerModel:
    """The planner model called ``name`` (case-insensitive); SolrlError listing the known names."""
    key = name.strip().lower().replace("_", "-")
    key = MODEL_ALIASES.get(key, key)
    if key not in MODELS:
        specs = {b.key: b for b in backbone_specs()}
        if key in specs:  # a backbone solrl runs whose full-size transformer the planner does not model
            raise SolrlError(f"the planner has no full-size model of {specs[key].title} (model.kind "
                             f"{specs[key].kind}): it prices {', '.join(MODELS)}")
        raise SolrlError(f"unknown model '{name}'; known: {', '.join(MODELS)}")
    return MODELS[key]


# ---------------------------------------------------------------------------------------------- counting


@dataclass(frozen=True)
class FlopBreakdown:
    """FLOPs of one call, split by where they happen (see the module docstring)."""

    total: float
    linear: float
    conv: float
    attention: float
    low_precision: float
    by_op: dict[str, float] = field(default_factory=dict)

    @property
    def low_precision_share(self) -> float:
        return self.low_precision / self.total if self.total else 0.0


def count_flops(module: nn.Module, call: Callable[[], object], low_precision_names=()) -> FlopBreakdown:
    """Run ``call()`` (which uses ``module``) under FlopCounterMode and split its FLOPs.

    ``low_precision_names`` are dotted module names (relative to ``module``) whose FLOPs count as low precision.
    Works on meta tensors. A module name that does not exist raises ValueError.
    """
    from torch.utils.flop_counter import FlopCounterMode

    names = dict(module.named_modules())
    missing = [n for n in low_precision_names if n not in names]
    if missing:
        raise ValueError(f"not modules of {type(module).__name__}: {missing[:3]}")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    counter = FlopCounterMode(display=False)
    # the math attention kernel: FlopCounterMode counts its matmuls on any device (it has no formula for the CPU
    # flash kernel, so real CPU tensors would count attention as 0); the same FLOPs as the fused kernels
    with sdpa_kernel(SDPBackend.MATH), counter, torch.no_grad():
        call()
    counts = counter.get_flop_counts()
    total = float(sum(counts["Global"].values()))
    by_op = {str(op): float(v) for op, v in counts["Global"].items()}
    root = type(module).__name__

    def of(name: str) -> float:
        return float(sum(counts.get(f"{root}.{name}", {}).values()))

    linear = sum(of(n) for n, m in names.items() if n and isinstance(m, nn.Linear))
    conv = sum(of(n) for n, m in names.items() if n and isinstance(m, nn.modules.conv._ConvNd))
    low = sum(of(n) for n in set(low_precision_names))
    return FlopBreakdown(total, linear, conv, total - linear - conv, low, by_op)


def example_inputs(kind: str, config: dict, image_tokens: int, text_tokens: int, batch: int = 1) -> dict:
    """Meta-device keyword inputs of one forward of the diffusers transformer of backbone `kind` (its adapter's
    `meta_inputs`)."""
    with torch.device("meta"):
        return adapter_class(kind).meta_inputs(config, image_tokens, text_tokens, batch)


def low_precision_names(config_path: str | Path, spec: ModelSpec, model: nn.Module | None = None) -> list[str]:
    """Names of the layers the explore copy runs in 4 bits: the project's eligibility rule (official skip names,
    min width, the real-GEMM backends' shape rule) on the meta model of ``config_path`` (``model`` if given).
    For the LinearFFN stand-in, the FFN's 1×1 convs are judged as the Linear layers they stand for, on a separate
    meta copy (their names are those of the convs, whose FLOPs then count as low precision)."""
    if spec.ffn_convs_as_linear:
        judged = ffn_convs_as_linear(build_meta_model(config_path))
    else:
        judged = model if model is not None else build_meta_model(config_path)
    return eligible_linears(judged, spec.skip_names, spec.min_width, shape_rule=fp8_shape_rule)


# ---------------------------------------------------------------------------------------------- per model


@dataclass(frozen=True)
class ForwardFlops:
    """One transformer forward of one sample at the official resolution."""

    model: str
    title: str
    model_class: str
    params: int
    resolution: int
    image_tokens: int
    text_tokens: int
    total: float
    linear: float
    conv: float
    attention: float
    low_precision: float
    low_precision_layers: int
    by_op: dict[str, float]

    @property
    def low_precision_share(self) -> float:
        return self.low_precision / self.total if self.total else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["low_precision_share"] = self.low_precision_share
        return d


@lru_cache(maxsize=None)
def _forward_flops(key: str, spec: ModelSpec, directory: str) -> ForwardFlops:
    path = Path(directory) / spec.config_file
    if not path.is_file():
        raise SolrlError(f"model config not found: {path}")
    config = json.loads(path.read_text())
    model = build_meta_model(path)
    params = sum(p.numel() for p in model.parameters())
    low_names = low_precision_names(path, spec, model)
    inputs = example_inputs(spec.kind, config, spec.image_tokens, spec.text_tokens)
    b = count_flops(model, lambda: model(**inputs, return_dict=False), low_names)
    return ForwardFlops(
        model=key, title=spec.title, model_class=type(model).__name__, params=params,
        resolution=spec.resolution, image_tokens=spec.image_tokens, text_tokens=spec.text_tokens,
        total=b.total, linear=b.linear, conv=b.conv, attention=b.attention, low_precision=b.low_precision,
        low_precision_layers=len(low_names), by_op=b.by_op,
    )


def forward_flops(model: str, config_directory: str | Path | None = None, **spec_overrides) -> ForwardFlops:
    """FLOPs of one forward of ``model`` (a ``MODELS`` key or alias) for one sample; cached per process.

    ``spec_overrides`` replace fields of the model's coverage ``ModelSpec`` (e.g. ``min_width=2431`` or
    ``skip_names=()`` to see another 4-bit coverage; ``image_tokens``/``text_tokens`` for another resolution).
    """
    m = get_model(model)
    if "skip_names" in spec_overrides:
        spec_overrides["skip_names"] = tuple(spec_overrides["skip_names"])
    spec = replace(m.spec, **spec_overrides) if spec_overrides else m.spec
    return _forward_flops(m.key, spec, str(config_dir(config_directory)))


# ---------------------------------------------------------------------------------------------- decode, reward

# Public diffusers config values of the VAEs (only what differs from the class defaults).
VAE_DECODERS: dict[str, dict] = {
    # FLUX.1-dev and SD3.5 share this architecture (vae/config.json of both repositories): 16 latent channels,
    # 4 levels of 128/256/512/512 channels, 2 ResNet layers per level, no quant convs.
    "kl-f8c16": dict(
        cls="AutoencoderKL",
        kwargs=dict(
            block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=2, latent_channels=16,
            use_quant_conv=False, use_post_quant_conv=False,
        ),
    ),
    # Qwen/Qwen-Image vae/config.json: the class defaults (base width 96, levels 1/2/4/4, 2 res blocks, z 16, f8)
    "qwen-f8c16": dict(cls="AutoencoderKLQwenImage", kwargs={}),
    # Wan-AI/Wan2.1-T2V-1.3B-Diffusers and -14B-Diffusers vae/config.json: the class defaults (base width 96, levels
    # 1/2/4/4, 2 res blocks, z 16, f8 in space and 4 in time, causal 3D convolutions)
    "wan-f8c16": dict(cls="AutoencoderKLWan", kwargs={}),
    # mit-han-lab/dc-ae-f32c32-sana-1.0-diffusers: 3 ResBlock + 3 EfficientViT levels, 3 layers each, multiscale 5
    # attention, interpolation upsampling (the class defaults hold the channel widths and layer counts).
    "dc-ae-f32c32": dict(
        cls="AutoencoderDC",
        kwargs=dict(
            encoder_block_types=("ResBlock",) * 3 + ("EfficientViTBlock",) * 3,
            decoder_block_types=("ResBlock",) * 3 + ("EfficientViTBlock",) * 3,
            upsample_block_type="interpolate", downsample_block_type="Conv",
        ),
    ),
}


@lru_cache(maxsize=None)
def vae_decode_flops(vae: str, latent_shape: tuple[int, ...]) -> float:
    """FLOPs of decoding one latent of ``latent_shape`` (C, H, W) with the VAE ``vae`` (meta device)."""
    import diffusers

    if vae not in VAE_DECODERS:
        raise SolrlError(f"unknown VAE '{vae}'; known: {', '.join(VAE_DECODERS)}")
    entry = VAE_DECODERS[vae]
    with torch.device("meta"):
        model = getattr(diffusers, entry["cls"])(**entry["kwargs"])
        z = torch.randn(1, *latent_shape)
    return count_flops(model, lambda: model.decode(z)).total


def vit_image_flops(width: int = 1280, layers: int = 32, mlp: int = 5120, patch: int = 14, image: int = 224,
                    proj: int = 1024) -> float:
    """FLOPs of a CLIP ViT image tower (defaults: ViT-H/14 at 224 px) for one image, counted analytically:
    patch-embedding conv, per layer QKV + output projections (4·w²), MLP (2·w·mlp) and attention products
    (2·n²·w), the final projection; 2 FLOPs per multiply-add."""
    n = (image // patch) ** 2 + 1
    patch_embed = 2 * (n - 1) * 3 * patch * patch * width
    per_layer = 2 * n * (4 * width * width + 2 * width * mlp) + 2 * 2 * n * n * width
    return float(patch_embed + layers * per_layer + 2 * width * proj)


REWARD_FLOPS_PER_IMAGE = vit_image_flops()
"""Reward scoring of one image: CLIP ViT-H/14 image tower at 224 px (PickScore, HPSv2.1 — the larger reward
backbones; the prompt's text tower runs once per prompt and is left out)."""


def decode_and_score_flops(model: str, resolution: int | None = None, frames: int | None = None) -> dict[str, float]:
    """Per-sample FLOPs of the VAE decode and the reward model's image tower for ``model`` at ``resolution`` and, for
    a video model, ``frames`` (None: its own): of one image, or of one video, each frame of which an image reward
    scores (reward_models.<name>.video_frames' default)."""
    m = get_model(model)
    latent = m.latent_shape if resolution is None and frames is None else backbone_spec(m.backbone).latent_at(
        resolution, frames)
    decode = vae_decode_flops(m.vae, tuple(latent))
    reward = REWARD_FLOPS_PER_IMAGE * (frames or backbone_spec(m.backbone).defaults.frames or 1)
    return {"decode": decode, "reward": reward, "total": decode + reward}
