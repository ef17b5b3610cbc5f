"""One `BackboneSpec` per backbone model: every fact about it that the rest of solrl reads, in one frozen object.

The specs live one per module in `solrl_core.models.backbones.specs` (each module defines `SPEC`) and are found by listing
that package, so a new backbone adds a file there (its spec), its adapter, its tiny maker and its preset part
(configs/parts/models/<key>.yaml) and nothing else. Readers: config validation (`model.kind`), the backbone
registry (adapters), the planner (flops, memory, compare), the quantization coverage report, the presets and
`solrl make-tiny`.

This module imports neither torch nor an adapter: adapters and tiny makers are named as "module:Class" /
"module:function" strings and imported when used.

The spec and the preset part. The spec is the one place of the model's values that Python reads where no config
exists (the adapters' defaults, the planner, the coverage report; it must work in an installed package without
configs/); the presets take the same values from it (`part_values`). The model's part (configs/parts/models/<key>.yaml)
holds only what the spec does not: the hub path, the evaluation steps, guidance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solrl_core.config.packaged import CONFIGS_DIR

PARTS_DIR = CONFIGS_DIR / "parts" / "models"


@dataclass(frozen=True)
class BackboneDefaults:
    """Per-backbone defaults that configs may override (train.lora_targets, quant.*, model.sampler,
    model.max_sequence_length, train.optimizer.grad_clip, ...)."""

    lora_targets: list[str]
    quant_skip_names: list[str]
    quant_min_width: int
    sampler: str = "euler"
    resolution: int = 32
    distilled_guidance: bool = False  # True: the guidance scale is a model input (FLUX.1-dev), not CFG
    max_sequence_length: int | None = None  # prompt tokens of the text encoder (T5, Gemma); None: no such setting
    grad_clip: float = 1.0  # the update's gradient-norm clip (train.optimizer.grad_clip)
    frames: int | None = None  # frames per sample of a video model (model.frames); None: an image model
    extra: dict = field(default_factory=dict)


# Layers of diffusers' DiT transformers that run once per sample (timestep embedding, AdaLN modulation) and layers of
# their text stream, by name (a substring of the qualified name, as skip names match).
DIT_SAMPLE_LAYERS = ("time_text_embed", "time_embed", "norm1.linear", "norm1_context.linear", "norm.linear",
                     "norm_out.linear")
DIT_TEXT_LAYERS = ("context_embedder", "caption_projection", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
                   "ff_context")


@dataclass(frozen=True)
class TokenLayout:
    """Which tokens each Linear of the full-size transformer runs on, by layer name (the first list that matches
    wins): once per sample, the text tokens, image and text tokens together; every other layer the image tokens.
    The coverage report and the planner weight layers by it."""

    sample: tuple[str, ...] = DIT_SAMPLE_LAYERS
    text: tuple[str, ...] = DIT_TEXT_LAYERS
    joint: tuple[str, ...] = ()


@dataclass(frozen=True)
class CoverageRow:
    """One row of the quantization coverage report (docs/quant_coverage.md) of a backbone: the model's transformer
    config under the backbone's official skip names and min width, optionally with the FFN's 1×1 convs counted as
    Linear layers; `planner_key` names the planner model that uses this row (None: the report only)."""

    key: str  # e.g. "sd35-large"
    title: str  # e.g. "SD3.5-Large"
    rule_note: str = ""
    ffn_convs_as_linear: bool = False
    planner_key: str | None = None
    planner_note: str = ""


@dataclass(frozen=True)
class BackboneSpec:
    """Everything solrl knows about one backbone model (see the module docstring)."""

    key: str  # the model's name in presets, the planner and make-tiny, e.g. "sd35l"
    title: str  # e.g. "SD3.5-Large"
    kind: str  # its `model.kind` (several models may share one adapter, e.g. "sd35")
    adapter: str  # "module:Class" of its `solrl_core.models.backbones.base.Backbone` subclass
    defaults: BackboneDefaults  # the official settings a config's nulls fall back to
    order: int  # position in tables and listings (the specs are discovered in no particular order)
    # full-size model, for the coverage report and the planner (None for a backbone without one)
    config_file: str | None = None  # diffusers transformer config in solrl_core/models/model_configs
    tokens: TokenLayout = TokenLayout()  # which layers see which tokens
    image_tokens: int = 0  # per sample at defaults.resolution (a video's: every latent frame's)
    text_tokens: int = 0  # per prompt at defaults.max_sequence_length
    coverage: tuple[CoverageRow, ...] = ()
    # planner shapes
    timestep_fraction: float = 0.6  # the official train.timestep_fraction
    vae: str = ""  # key of solrl_core.planner.flops.VAE_DECODERS
    latent_shape: tuple[int, ...] = ()  # of one sample at defaults.resolution, as the VAE decoder takes it (C, H, W)
    aliases: tuple[str, ...] = ()  # other names the planner accepts
    # a word of model.path (lower case) that names this model among the specs of its kind ("medium": SD3.5-Medium,
    # not SD3.5-Large); None: the kind's model when model.path names none
    path_marker: str | None = None
    text_encoders: dict[str, str] = field(default_factory=dict)  # title -> solrl_core.planner.memory.HF_MODELS name
    micro_batch: int = 8  # the official train.micro_batch per GPU
    # train.lora_rank / train.lora_alpha where the model's part sets its own; None: the shared recipe's
    # (configs/parts/official.yaml: 32 / 64, planner.memory.LORA_RANK)
    lora_rank: int | None = None
    lora_alpha: float | None = None
    # what the settings of the model's presets are (`solrl presets --write` heads a preset's file with it)
    settings: str = "official settings (docs/method.md)"
    tiny_maker: str | None = None  # "module:function" writing a tiny diffusers directory (`solrl make-tiny`)
    # the weights generate at defaults.resolution only (the embedded model: the adapter takes the side from its
    # weights, whose positional embeddings are that size), so model.resolution may be nothing else
    fixed_resolution: bool = False
    # a video model's VAE: frames per latent frame after the first ((frames - 1) must be a multiple of it)
    temporal_compression: int = 1
    # a video model whose decoder is causal in time: its first latent frames decode to the video's first frames exactly,
    # whatever follows them, so the explore may decode only the frames its rewards score (explore.decode.frames)
    causal_decoder: bool = False
    # the weights ship with solrl (the embedded models): the planner prices the loaded model itself
    shipped: bool = False
    # an editing model: its prompts come with source images (its adapter's `edits`; the learning matrix's edit world)
    edits: bool = False
    # a model of several experts that take turns over the schedule (solrl_core/models/experts.py): their pipeline
    # attributes, highest noise first (Wan2.2-T2V-A14B: transformer, transformer_2); () = one transformer
    experts: tuple[str, ...] = ()
    # the experts LoRA trains when train.experts is null (every one unless the spec says otherwise)
    trained_experts: tuple[str, ...] = ()

    @property
    def resolution_multiple(self) -> int | None:
        """Pixels per image-token side, the VAE factor times the latent patch (FLUX.1: f8 x 2x2 packing = 16; SANA:
        DC-AE f32 x 1 = 32): model.resolution must be a multiple of it. Read from the full-size model's tokens at its
        default resolution (a square of `image_tokens` per latent frame); None without them. The adapter checks the
        loaded files' own factors again (`check_resolution` of the diffusers adapters)."""
        if not self.image_tokens:
            return None
        return self.defaults.resolution // math.isqrt(self.image_tokens // self.latent_frames)

    @property
    def latent_frames(self) -> int:
        """Latent frames of one sample at defaults.frames (1 for an image model)."""
        return self.latent_frames_at(None)

    def latent_frames_at(self, frames: int | None) -> int:
        """Latent frames of one sample of `frames` frames (None: defaults.frames; 1 for an image model)."""
        if self.defaults.frames is None:
            return 1
        return ((frames or self.defaults.frames) - 1) // self.temporal_compression + 1

    def latent_frames_for(self, frames: int) -> int:
        """The latent frames that decode to a video's first `frames` frames: the first latent frame makes one frame,
        each later one `temporal_compression`."""
        return -(-(frames - 1) // self.temporal_compression) + 1

    def latent_at(self, resolution: int | None = None, frames: int | None = None) -> tuple[int, ...]:
        """One sample's latent (`latent_shape`, as the VAE decoder takes it) at `resolution` and, for a video model,
        `frames` (None: the defaults')."""
        native = self.defaults.resolution
        resolution = resolution or native
        *channels, height, width = self.latent_shape
        if self.defaults.frames is not None:  # (C, latent frames, H, W)
            channels = [channels[0], self.latent_frames_at(frames)]
        return (*channels, height * resolution // native, width * resolution // native)

    @property
    def part(self) -> Path:
        """configs/parts/models/<key>.yaml: where it exists, the official presets of this model extend it."""
        return PARTS_DIR / f"{self.key}.yaml"

    def part_values(self) -> dict[str, Any]:
        """The dotted config keys the spec gives every preset of this model (solrl_core/config/presets.py), with its
        values: the model part (`part`) sets none of them."""
        d = self.defaults
        return {
            "model.kind": self.kind,
            "model.resolution": d.resolution,
            "model.sampler": d.sampler,
            "model.max_sequence_length": d.max_sequence_length,
            **({"model.frames": d.frames} if d.frames is not None else {}),  # a video model's
            "quant.skip_names": list(d.quant_skip_names),
            "quant.min_width": d.quant_min_width,
            "train.lora_targets": None,  # null: the adapter's default, the official list
            "train.timestep_fraction": self.timestep_fraction,
            "train.micro_batch": self.micro_batch,
            "train.optimizer.grad_clip": d.grad_clip,
            # only a model with its own rank sets it in its part (the others take official.yaml's)
            **({"train.lora_rank": self.lora_rank} if self.lora_rank is not None else {}),
            **({"train.lora_alpha": self.lora_alpha} if self.lora_alpha is not None else {}),
        }
