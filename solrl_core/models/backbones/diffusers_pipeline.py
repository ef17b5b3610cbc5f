"""What the adapters of diffusers text-to-image pipelines share: loading the pipeline from `model.path`, the VAE
decode, the flow-matching schedule of the model's scheduler and releasing the text encoders.

The latent layout is shared: (channels, H / vae factor, W / vae factor), cut into `patch` x `patch` tokens. A
subclass names its pipeline class and text encoders (and `latent_channels` / `patch` where the transformer's config
does not say them directly) and implements `encode_prompts` (through the pipeline's own `encode_prompt`) and
`velocity` (calling the transformer the way the pipeline's denoising loop does). The pipeline object is kept as
`self.pipe`: its components are the loaded models, and its helper methods are used as they are rather than
re-written.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from solrl_core.models.backbones.base import Backbone, Conditioning, module_device, sibling_errors
from solrl_core.errors import SolrlError

if TYPE_CHECKING:
    from solrl_core.config.schema import ModelConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


@contextlib.contextmanager
def quiet_hf():
    """Silence diffusers' and transformers' chatter and progress bars (loading and saving)."""
    from diffusers.utils import logging as df_logging
    from transformers.utils import logging as hf_logging

    old = df_logging.get_verbosity(), hf_logging.get_verbosity()
    df_logging.set_verbosity_error()
    hf_logging.set_verbosity_error()
    bars = df_logging.is_progress_bar_enabled(), hf_logging.is_progress_bar_enabled()
    df_logging.disable_progress_bar()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        df_logging.set_verbosity(old[0])
        hf_logging.set_verbosity(old[1])
        if bars[0]:
            df_logging.enable_progress_bar()
        if bars[1]:
            hf_logging.enable_progress_bar()


def check_local_pipeline_dir(path: Path, pipeline_class: str, kind: str) -> None:
    """A local `model.path` must be a diffusers directory of `pipeline_class` with every component's subfolder."""
    wanted = f"model.kind '{kind}' needs a diffusers {pipeline_class} directory"
    if not path.is_dir():
        raise SolrlError(f"model.path {path} is not a directory ({wanted})")
    index_file = path / "model_index.json"
    if not index_file.is_file():
        raise SolrlError(f"model.path {path} has no model_index.json ({wanted})")
    index = json.loads(index_file.read_text())
    found = index.get("_class_name")
    if found != pipeline_class:
        raise SolrlError(f"model.path {path} holds a {found}, but model.kind '{kind}' needs a {pipeline_class}")
    missing = [
        name for name, spec in index.items()
        if not name.startswith("_") and isinstance(spec, list) and spec[0] is not None and not (path / name).is_dir()
    ]
    if missing:
        raise SolrlError(f"model.path {path} lacks the subfolder(s) {', '.join(missing)} listed in model_index.json")


def pipeline_source(pipeline_class: str, model: "ModelConfig") -> str:
    """What `from_pretrained` is given for `model.path`: a local diffusers directory of `pipeline_class` (checked,
    nothing loaded) or a hub id; a one-line SolrlError otherwise."""
    kind = model.kind
    if not model.path:
        raise SolrlError(f"model.path is required for model.kind '{kind}': a local diffusers directory or a hub id")
    local = Path(model.path).expanduser()
    if local.exists():
        check_local_pipeline_dir(local, pipeline_class, kind)
        source = str(local)
    elif _HUB_ID.match(model.path):
        source = model.path
    else:
        raise SolrlError(
            f"model.path {model.path} does not exist (a local diffusers {pipeline_class} directory or a hub id)"
        )
    return source


def load_pipeline(pipeline_class: str, model: "ModelConfig"):
    """`<pipeline_class>.from_pretrained(model.path)` in model.dtype (diffusers' `dtype`, formerly `torch_dtype`),
    on model.device, every module frozen in eval mode; nothing is downloaded unless model.allow_downloads.
    Problems become one-line SolrlErrors."""
    import diffusers

    source = pipeline_source(pipeline_class, model)
    local = Path(model.path).expanduser()
    try:
        with quiet_hf():
            pipe = getattr(diffusers, pipeline_class).from_pretrained(
                source, dtype=DTYPES[model.dtype], local_files_only=not model.allow_downloads
            )
    except (OSError, ValueError) as exc:
        hint = ""
        if not (model.allow_downloads or local.exists()):
            hint = " (not in the local hub cache; set model.allow_downloads: true to download it)"
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SolrlError(f"cannot load {pipeline_class} from model.path {model.path}{hint}: {detail}") from None
    pipe.to(torch.device(model.device))
    pipe.set_progress_bar_config(disable=True)
    for module in pipe.components.values():
        if isinstance(module, torch.nn.Module):
            module.eval().requires_grad_(False)
    return pipe


def square_side(config: dict, image_tokens: int) -> int:
    """The latent side whose `patch_size` patches make `image_tokens` tokens in a square."""
    patch = config.get("patch_size", 1)
    side = math.isqrt(image_tokens) * patch
    if side * side != image_tokens * patch**2:
        raise ValueError(f"image_tokens {image_tokens} is not a square number of patches")
    return side


class DiffusersPipelineBackbone(Backbone):
    """Base adapter around a loaded diffusers pipeline (`self.pipe`)."""

    pipeline_class: str  # e.g. "FluxPipeline"
    title: str  # the model family in messages, e.g. "FLUX.1"
    text_encoder_names: tuple[str, ...]  # the pipeline's text encoder attributes, freed by release_text_encoders

    def __init__(self, pipe, model: "ModelConfig"):
        self.pipe = pipe
        self.model_config = model
        self.scheduler_config = dict(pipe.scheduler.config)  # what `sigmas` reads (a sibling view has its own)
        self.transformer = pipe.transformer
        self.vae = pipe.vae
        self.device = torch.device(model.device)
        self.resolution = model.resolution or self.defaults.resolution
        self.max_sequence_length = model.max_sequence_length or self.defaults.max_sequence_length
        self.decode_chunk = model.decode_chunk
        self.text_encoders_released = False
        self.check_resolution()

    @classmethod
    def check_files(cls, model: "ModelConfig") -> None:
        pipeline_source(cls.pipeline_class, model)

    @classmethod
    def load(cls, model: "ModelConfig") -> "DiffusersPipelineBackbone":
        return cls(load_pipeline(cls.pipeline_class, model), model)

    @property
    def latent_channels(self) -> int:
        return self.transformer.config.in_channels

    @property
    def patch(self) -> int:
        """Latent pixels per token side."""
        return self.transformer.config.patch_size

    def check_resolution(self) -> None:
        """Raise a SolrlError when model.resolution does not fit the model (extended per architecture)."""
        multiple = self.pipe.vae_scale_factor * self.patch
        if self.resolution % multiple:
            raise SolrlError(
                f"model.resolution {self.resolution} must be a multiple of {multiple} for {self.title} "
                f"(VAE factor {self.pipe.vae_scale_factor}, {self.patch}x{self.patch} latent patches)"
            )

    @property
    def latent_shape(self) -> tuple[int, ...]:
        side = self.resolution // self.pipe.vae_scale_factor
        return (self.latent_channels, side, side)

    @property
    def image_seq_len(self) -> int:
        """Image tokens the transformer sees at this resolution (what a dynamic shift depends on)."""
        _, h, w = self.latent_shape
        return (h // self.patch) * (w // self.patch)

    def schedule_input(self, steps: int) -> np.ndarray | None:
        """The sigmas handed to the scheduler's `set_timesteps` (which then shifts them), or None for the
        scheduler's own default timesteps. None here: StableDiffusion3Pipeline's way, which the reference samples
        SD3.5 with; FLUX overrides it."""
        return None

    def sigmas(self, steps: int) -> list[float]:
        """The model's scheduler's sigmas for `steps` steps, terminal 0 excluded: `set_timesteps(steps)` on a
        FlowMatchEulerDiscreteScheduler built from the model's scheduler config, given `schedule_input(steps)` and,
        when the config asks for the dynamic shift, mu from the image sequence length (as the diffusers pipelines
        compute it)."""
        from diffusers import FlowMatchEulerDiscreteScheduler
        from diffusers.pipelines.flux.pipeline_flux import calculate_shift

        if steps < 1:
            raise ValueError("steps must be >= 1")
        config = self.scheduler_config
        scheduler = FlowMatchEulerDiscreteScheduler.from_config(config)
        kwargs = {}
        if config.get("use_dynamic_shifting", False):
            kwargs["mu"] = calculate_shift(
                self.image_seq_len,
                config.get("base_image_seq_len", 256),
                config.get("max_image_seq_len", 4096),
                config.get("base_shift", 0.5),
                config.get("max_shift", 1.15),
            )
        scheduler.set_timesteps(steps, sigmas=self.schedule_input(steps), **kwargs)
        return [float(s) for s in scheduler.sigmas[:-1]]

    def scheduler_time_velocity(self, transformer: torch.nn.Module, x_t: torch.Tensor, sigma: torch.Tensor,
                                cond: Conditioning) -> torch.Tensor:
        """The transformer's output for the latents `x_t` at `sigma` given as a timestep on the scheduler's scale
        (`num_train_timesteps` x sigma), every conditioning tensor passed by its name, in the transformer's dtype on
        its device: how SD3's and Wan's pipelines call their transformers. Comes back in x_t's dtype."""
        dtype, device = transformer.dtype, module_device(transformer)
        timestep = sigma.to(device=device, dtype=torch.float32).reshape(-1).expand(x_t.shape[0])
        out = transformer(
            hidden_states=x_t.to(device=device, dtype=dtype),
            timestep=timestep * self.scheduler_config["num_train_timesteps"],
            **{name: value.to(device=device, dtype=dtype) for name, value in cond.items()},
            return_dict=False,
        )[0]
        return out.to(x_t.dtype)

    def load_sibling_transformer(self, path: str) -> torch.nn.Module:
        """The `transformer/` of the pipeline at `path` (a local directory or a hub id, as model.path), through this
        transformer's class, in its dtype, on its device."""
        model = self.model_config.model_copy(update={"path": path})
        with sibling_errors():
            source = pipeline_source(self.pipeline_class, model)
        cls = type(self.transformer)
        try:
            with quiet_hf():
                transformer = cls.from_pretrained(source, subfolder="transformer", dtype=self.transformer.dtype,
                                                  local_files_only=not model.allow_downloads)
        except (OSError, ValueError) as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SolrlError(f"cannot load a {cls.__name__} from explore.sibling.path {path}: {detail}") from None
        return transformer.to(self.device)

    def adopt_sibling_schedule(self, path: str) -> None:
        """The sibling's scheduler config (its `scheduler/`: a step-distilled model samples on its own shift), when
        it has one."""
        from diffusers import FlowMatchEulerDiscreteScheduler

        model = self.model_config.model_copy(update={"path": path})
        try:
            with quiet_hf():
                config = FlowMatchEulerDiscreteScheduler.load_config(
                    pipeline_source(self.pipeline_class, model), subfolder="scheduler",
                    local_files_only=not model.allow_downloads)
        except (OSError, ValueError):
            return
        self.scheduler_config = dict(config)

    def require_text_encoders(self) -> None:
        if self.text_encoders_released:
            raise SolrlError(
                f"the {self.name} text encoders were released (model.release_text_encoders) before every prompt was "
                "encoded; encode all prompts first or set model.release_text_encoders: false"
            )

    def release_text_encoders(self) -> None:
        for name in self.text_encoder_names:
            setattr(self.pipe, name, None)
        self.text_encoders_released = True
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> np.ndarray:
        """Un-normalise the latents with the VAE's scaling/shift factors, decode `model.decode_chunk` at a time,
        post-process as the pipeline does (output_type "np"), and round to uint8 (B, H, W, 3)."""
        vae = self.vae
        shift = vae.config.get("shift_factor") or 0.0
        images = []
        for chunk in latents.split(self.decode_chunk):
            z = chunk.to(device=vae.device, dtype=vae.dtype) / vae.config.scaling_factor + shift
            image = vae.decode(z, return_dict=False)[0]
            images.append(self.pipe.image_processor.postprocess(image, output_type="np"))
        return (np.concatenate(images) * 255).round().astype(np.uint8)
