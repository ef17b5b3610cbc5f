"""Typed run configuration: YAML -> validated pydantic objects.

Unknown keys and bad values are rejected with a message naming the key, and so are settings that contradict the
config's `family` (solrl_core/config/families.py). Every field carries a description: `solrl config --explain` and
docs/config.md are generated from them (solrl_core/config/explain.py). Reading a config (a file, a packaged
config or an official preset by name, with `extends`): solrl_core/config/sources.py; with `--set` overrides and a
tiny model's run overrides, validated: solrl_core/config/loading.py.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any, Literal, get_args

import yaml
from pydantic import (BaseModel, ConfigDict, Field, StrictInt, ValidationError, ValidationInfo, field_validator,
                      model_validator)
from pydantic_core import PydanticCustomError

from solrl_core import renamed
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.excerpts import cut, excerpt, one_line
from solrl_core.config.limits import (  # the integer settings' upper bounds (run_config.py and tests read them from here too)
    MAX_BATCH, MAX_ITERATIONS, MAX_NODES, MAX_PROCESSES, MAX_PROMPTS, MAX_RANK, MAX_SECONDS, MAX_SEED, MAX_SEEDS,
    MAX_FRAMES, MAX_SIDE, MAX_STEPS, MAX_WIDTH)

Precision = Literal["nvfp4", "nvfp4_emulated", "fp8", "fp8_emulated", "bf16", "fp32", "auto"]


def _takes_floats(annotation: Any) -> bool:
    """Whether a field type holds floats (float, float | None, tuple[float, float], dict[str, float], ...)."""
    return annotation is float or any(_takes_floats(arg) for arg in get_args(annotation))


# The method families; what each one's settings must say: solrl_core/config/families.py
Family = Literal["baseline", "naive_scaling", "naive_quant", "sol_rl"]  # old names: solrl_core/renamed.py
FAMILIES: tuple[str, ...] = get_args(Family)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_not_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        """A float setting (or a float in a list or mapping) given true/false is refused, not read as 1.0/0.0
        (YAML reads yes/no/on/off as booleans too). Integer settings refuse them by being strict (`_count`)."""
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        booleans = any(isinstance(item, bool) for item in items)
        if booleans and _takes_floats(cls.model_fields[info.field_name].annotation):
            raise PydanticCustomError("float_type", "Input should be a number, not true or false")
        return value


# The learning rate's upper bound. AdamW moves every weight by about lr per step whatever the gradient's scale (the
# update is m / (sqrt(v) + eps), of magnitude ~1), so at lr = 1 each step already moves a LoRA weight by more than
# its own size (B starts at 0, A at about 1/sqrt(rank): solrl_core/rl/policy.py): the adapter is noise after one
# step. The references train LoRA at 1e-4 to 3e-4 (NVlabs/Sana configs/sol_rl, DiffusionNFT, flow_grpo). `lr: 1e30`
# or `.inf` once trained a whole iteration and failed only when the weights were saved (a FloatingPointError, a
# pending journal).
MAX_LR = 1.0


def _count(default: int | None, low: int, high: int, description: str, **kwargs: Any) -> Any:
    """An integer setting from `low` to `high`, which the end of its description states. Only integers: strict, so
    `true` or `2.5` (or `10.0`) is refused, not read as 1, 2 or 10."""
    return Field(default, ge=low, le=high, strict=True, description=f"{description}; {low} to {high:,}", **kwargs)


def _real(default: float | None, description: str, *, ge: float | None = None, gt: float | None = None,
          le: float | None = None, lt: float | None = None) -> Any:
    """A float setting: finite (nan, .inf and a string such as "inf" are refused; true/false too, see `_Strict`) and
    within the bounds given, which the end of its description states ("finite, > 0 and ≤ 1")."""
    bounds = [f"{sign} {value:g}" for sign, value in (("≥", ge), (">", gt), ("≤", le), ("<", lt)) if value is not None]
    return Field(default, ge=ge, gt=gt, le=le, lt=lt, allow_inf_nan=False,
                 description=f"{description}; {', '.join(['finite', ' and '.join(bounds)] if bounds else ['finite'])}")


def _check_weights(key: str, weights: dict[str, float] | None) -> None:
    """Reward weights are finite and add up to more than 0 (a weight may be negative, a penalty; 0 scores a reward
    for the record only). All zero, the total reward is 0 for every sample: nothing to rank or learn from."""
    for name, weight in (weights or {}).items():
        if not math.isfinite(weight):
            raise ValueError(f"{key}.{cut(name)}: the weight must be a finite number (got {weight})")
    if weights and not sum(weights.values()) > 0:
        raise ValueError(f"{key}: the weights add up to {sum(weights.values()):g}; they must add up to more than 0 "
                         "(all 0: every sample's total reward is 0, nothing to rank or learn from), e.g. 1.0 on the "
                         "reward that counts (a weight of 0 only scores a reward alongside)")


BackboneKind = str
"""A registered kind (solrl_core/models/backbones/specs/) or "package.module:Class" (a plug-in adapter), checked by
solrl_core.models.backbones.registry.check_kind."""
SamplerName = Literal["euler", "dpmpp_2m"]


class ModelConfig(_Strict):
    kind: BackboneKind = Field(
        "embedded", description="backbone adapter: a registered kind (embedded, flux1, sd35, sana, ...: one spec each "
        "in solrl_core/models/backbones/specs/) or `package.module:Class` naming a Backbone subclass of your own package "
        "(docs/extending.md)")
    path: str | None = Field(
        None, description="local diffusers directory or hub id; null = the shipped embedded model (embedded only)"
    )
    device: str = Field("cpu", description="torch device of sampling, scoring and the update: cpu, cuda, cuda:1, ...")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="weights of the transformer and encoders (bfloat16 on GPUs); the LoRA θ, θ_old, their "
        "optimizer state and EMA stay float32 whatever this is"
    )
    resolution: int | None = _count(
        None, 8, MAX_SIDE, "image side in pixels; null = the backbone's default. A multiple of the backbone's pixels "
        "per image token (its VAE factor times its latent patch: 16 for FLUX.1, 32 for SANA; solrl_core/models/backbones/"
        "specs/); the embedded model takes only its weights' own side (32 for the shipped ones)")
    frames: int | None = _count(
        None, 1, MAX_FRAMES, "frames of each sample of a video backbone (wan: 1 + a multiple of 4, the VAE's temporal "
        "compression); null = the backbone's default; image backbones take none")
    low_noise_guidance: float | None = _real(
        None, "a backbone of experts (wan22): the classifier-free guidance scale of the low-noise expert's steps "
        "(WanPipeline's guidance_scale_2) wherever the phase's guidance.rollout / guidance.eval is above 1; null = the "
        "phase's own scale", ge=0)
    sampler: SamplerName | None = Field(None, description="ODE solver; null = the backbone's default")
    max_sequence_length: int | None = _count(None, 1, MAX_WIDTH, "text tokens (T5/Gemma); null = default")
    gradient_checkpointing: bool = Field(False, description="recompute activations in the update (saves memory)")
    decode_chunk: int = _count(8, 1, MAX_BATCH, "latents decoded per VAE call")
    release_text_encoders: bool = Field(
        False, description="drop the text encoders from the device once every prompt of the run is cached"
    )
    allow_downloads: bool = Field(False, description="let from_pretrained reach the hub (off: local files only)")
    compile: bool | Literal["auto"] = Field(
        "auto", description="torch.compile the sampling copies (explore, regenerate, evaluation, audit; compiled once "
        "per process, reused by every later copy: solrl_core/models/compiled.py): auto = on a CUDA device (as the "
        "reference compiles its inference copies), off on a CPU (a demo run breaks even: docs/lab/compile-2026-11-29.md)")
    compile_mode: str | None = Field(
        None, description="torch.compile mode of the sampling copies; null = max-autotune-no-cudagraphs on a GPU "
        "(UniRL's Sol-RL scouts), default on a CPU")
    compile_backend: str = Field(
        "inductor", description="torch.compile backend of the sampling copies (inductor; eager or aot_eager trace "
        "without generating kernels, for debugging)")
    tf32: bool = Field(
        True, description="TensorFloat-32 matrix products for float32 work on a CUDA device (the LoRA θ's layers, "
        "float32 rewards; flow_grpo's allow_tf32); no effect on a CPU")



class GuidanceConfig(_Strict):
    """Guidance scales. 1.0 = none. FLUX.1-dev's distilled guidance embedding takes the value directly; the others
    use classifier-free guidance with the empty prompt (an editing model's: with the row's source) when the scale is
    above 1."""

    rollout: float = _real(1.0, "scale of the explore and regenerate sampling (official 1.0)", ge=0)
    train: float = _real(1.0, "scale of the velocities inside the update (official 1.0): a distilled-guidance "
                         "model's input (FLUX.1-dev, Kontext); any other refuses a value but 1 (the update runs no "
                         "CFG)", ge=0)
    eval: float = _real(1.0, "scale of the held-out evaluation's sampling (official 1.0)", ge=0)


class PromptsConfig(_Strict):
    train: str = Field(
        "builtin:shapes-train",
        description="builtin:shapes-train | builtin:shapes-test | builtin:motion-train | builtin:motion-test | a "
        "text file (one prompt per line, # comments) | "
        'a .jsonl file (one {"prompt": ...} object per line, other keys kept as metadata) (solrl_core/prompts.py)',
    )
    split: str | None = Field(
        None, description='JSONL only: train on the lines whose "split" field equals this (e.g. train); null = all'
    )
    per_iteration: int = _count(4, 1, MAX_PROMPTS, "prompts drawn per iteration (official 48)")


class QuantConfig(_Strict):
    skip_names: list[str] | None = Field(
        None,
        description="Linear layers kept in high precision: any whose qualified name contains one of these (substring); "
        "null = backbone default",
    )
    min_width: int | None = _count(
        None, 0, MAX_WIDTH, "skip Linear layers with max(in, out) <= this; null = the backbone's (official FLUX 1000, "
        "SD3.5-L 2432, SANA 2240)"
    )
    weight_format: Literal["nvfp4", "nvfp4_2d"] = Field(
        "nvfp4_2d", description="NVFP4 weight scaling blocks: nvfp4_2d = 16x16 tiles (Transformer Engine's recipe, "
        "official), nvfp4 = 1x16 rows"
    )
    act_format: Literal["nvfp4"] = Field(
        "nvfp4", description="NVFP4 activation scaling blocks: 1x16 along the reduction dimension"
    )
    lora_branch: bool = Field(
        False, description="explore with W0 alone quantized (the same every iteration; its report is computed once "
        "per run) and θ_old's LoRA applied in fp32 beside the 4-bit base (as SVDQuant keeps a 16-bit low-rank "
        "branch): no merged copy, LoRA updates never rounded away; false = quantize the merged W0 + θ_old every "
        "iteration (the reference's way)"
    )


class GuardrailConfig(_Strict):
    """Raise the explore precision/steps when its ranking fidelity (Spearman, proxy vs final) stays low."""

    enabled: bool = Field(False, description="watch the fidelity each iteration (sol_rl only: needs regenerate)")
    floor: float = _real(0.5, "Spearman below this counts as a bad iteration", ge=-1, le=1)
    patience: int = _count(2, 1, MAX_ITERATIONS, "consecutive bad iterations before escalating")
    ladder: list[tuple[Precision, int]] = Field(
        default_factory=lambda: [("fp8_emulated", 6), ("fp32", 6), ("fp32", 10)],
        description=f"settings to move to, one rung per escalation, after the configured precision/steps (steps 1 to "
        f"{MAX_STEPS:,})",
    )

    @field_validator("ladder", mode="before")
    @classmethod
    def _ladder_steps(cls, ladder: Any) -> Any:
        for rung in ladder if isinstance(ladder, list) else ():
            steps = rung[1] if isinstance(rung, (list, tuple)) and len(rung) == 2 else None
            if steps is not None and (type(steps) is not int or not 1 <= steps <= MAX_STEPS):
                raise ValueError(f"explore.guardrail.ladder: steps must be a whole number from 1 to {MAX_STEPS:,} "
                                 f"(got {excerpt(steps)})")
        return ladder


class ExploreDecodeConfig(_Strict):
    """A cheaper decode of the explore's samples, which are decoded only to be ranked (solrl_core/config/
    decode_plan.py): sol_rl only, the regenerate decodes in full."""

    frames: Literal["all", "scored"] = Field(
        "all", description="video: all; or scored = decode only the frames the training rewards read (an image "
        "reward with reward_models.<name>.video_frames: 1 reads the first), from the first latent frames of a decoder "
        "causal in time (Wan's); the frames after them hold the last decoded one")
    scale: float = _real(1.0, "decode the latents resized to this share of their height and width (area), the frames "
                         "resized back (bilinear): the decode costs about its square (default 1, the full decode)",
                         gt=0, le=1)


class ExploreCacheConfig(_Strict):
    """A cache that skips transformer work between the explore's denoising steps, from diffusers' hooks
    (solrl_core/models/step_cache.py); only the explore copy gets it."""

    kind: Literal["none", "taylorseer"] = Field(
        "none", description="none; taylorseer = diffusers' TaylorSeer: the hooked modules (attention, or with "
        "use_lite_mode every block, extrapolating the output projection) are computed on a fixed schedule of steps "
        "and extrapolated on the others. Step-scheduled, so a seed's sample does not depend on its batch")
    options: dict[str, Any] = Field(
        default_factory=dict, description="the cache's settings, diffusers' TaylorSeerCacheConfig fields: "
        "cache_interval (≥ 1), disable_cache_before_step, disable_cache_after_step, max_order (each ≥ 0), "
        "use_lite_mode, skip_predict_identifiers, cache_identifiers (factors in float32)")

    @field_validator("options")
    @classmethod
    def _counts(cls, options: dict[str, Any]) -> dict[str, Any]:
        """The counts among the options are whole numbers in range (diffusers divides by cache_interval and takes
        the others as step indices); the other fields are checked against diffusers' when the cache is made."""
        for key, low in (("cache_interval", 1), ("disable_cache_before_step", 0), ("disable_cache_after_step", 0),
                         ("max_order", 0)):
            value = options.get(key)
            if key in options and not (value is None and key == "disable_cache_after_step") and (
                    type(value) is not int or not low <= value <= MAX_STEPS):
                raise ValueError(f"explore.cache.options.{key}: a whole number from {low} to {MAX_STEPS:,} (got "
                                 f"{excerpt(value)})")
        if "use_lite_mode" in options and not isinstance(options["use_lite_mode"], bool):
            raise ValueError(f"explore.cache.options.use_lite_mode: true or false (got "
                             f"{excerpt(options['use_lite_mode'])})")
        return options


class ExploreSiblingConfig(_Strict):
    """Another model to explore with: a smaller or step-distilled sibling of the trained one (solrl_core/models/
    backbones/base.py, `Backbone.sibling`)."""

    path: str | None = Field(
        None, description="the sibling's weights: a local model directory of the same kind as model.path (its "
        "transformer/ and scheduler/ are read; the trained model's tokenizer, text encoders and VAE stay), or a hub "
        "id; it must share the trained model's latent space and conditioning (e.g. FLUX.1-schnell for FLUX.1-dev, "
        "SD3.5-Large-Turbo or SD3.5-Medium for SD3.5-Large; `solrl distill-sibling` makes one of the embedded "
        "model). null = explore with the trained model itself. Sampled at explore.steps on its own schedule")
    policy: Literal["delta", "frozen"] = Field(
        "delta", description="delta = θ_old's LoRA update ΔW added to the sibling's weights (needs the sibling to "
        "have each LoRA-targeted layer with the same shape: a sibling of the same architecture), so its ranking "
        "follows the policy; frozen = the sibling as loaded (a smaller model): its ranking does not follow the "
        "policy, the fidelity guardrail watches it")


class ExploreConfig(_Strict):
    precision: Precision = Field(
        "auto", description="what the explore copy's Linear layers run in: nvfp4 / fp8 = real 4-/8-bit GEMMs "
        "(Blackwell / sm_89+), nvfp4_emulated / fp8_emulated = the same numerics anywhere (no speed-up), bf16, fp32 = "
        "nothing replaced (full precision); auto = nvfp4 on Blackwell, fp8 on Hopper/Ada, else nvfp4_emulated "
        "(official NVFP4; solrl_core/models/quant/backends.py)"
    )
    steps: int = _count(6, 1, MAX_STEPS, "ODE steps of the explore copy (official 6)")
    full_precision_first: int = _count(
        0, 0, MAX_STEPS, "the explore's first steps sampled at full precision (θ_old on W0, the regenerate's model), "
        "the others in `precision` (step-selective precision: Tencent-Hunyuan/UniRL's Sol-RL bf16_prefix_steps, "
        "default 0); a guardrail escalation drops it")
    full_precision_last: int = _count(
        0, 0, MAX_STEPS, "the explore's last steps sampled at full precision, likewise (UniRL's bf16_suffix_steps, "
        "default 0)")
    seeds_per_prompt: int = _count(16, 1, MAX_SEEDS, "N, candidates per prompt (official 96)")
    batch_size: int = _count(32, 1, MAX_BATCH, "candidates per forward batch; also the commit unit of the pool")
    keep_latents: bool = Field(
        True, description="store each candidate's final latent in the pool (always kept when regenerate is off: the "
        "update trains on them)"
    )
    cache: ExploreCacheConfig = Field(ExploreCacheConfig(), description="a step cache for the explore copy; a "
                                      "guardrail escalation drops it (its rungs are precision and steps alone)")
    sibling: ExploreSiblingConfig = Field(
        ExploreSiblingConfig(), description="explore with another model (sol_rl: regenerate and update stay with "
        "the trained one); a guardrail escalation goes back to the trained model")
    decode: ExploreDecodeConfig = Field(ExploreDecodeConfig(), description="a cheaper decode of the explore's "
                                        "samples (sol_rl; a guardrail escalation goes back to the full decode)")
    guardrail: GuardrailConfig = Field(GuardrailConfig(), description="ranking-fidelity guardrail (off by default)")


class SelectConfig(_Strict):
    mode: str = Field(
        "best_worst", description="which K seeds per prompt train: best_worst = K/2 highest + K/2 lowest proxy reward "
        "(official); top = K highest; random; extremes_random = K/4 best + K/4 worst + the rest at random; all = "
        "every seed (the baseline family); or package.module:Class, a SelectionRule of your own (solrl_core/rl/selection.py)"
    )
    k: int = _count(4, 1, MAX_SEEDS, "K, seeds kept per prompt (official 24)")


class RegenerateConfig(_Strict):
    enabled: bool = Field(
        True, description="sample the selected seeds again with the full-precision copy and train on those (sol_rl); "
        "false = train on the explore samples (the other families)"
    )
    steps: int = _count(10, 1, MAX_STEPS, "ODE steps of the full-precision copy (official 10)")
    batch_size: int = _count(32, 1, MAX_BATCH, "samples per forward batch; also the commit unit of its artifact")


class ScoreConfig(_Strict):
    """Reward scoring of the explore pool and the regenerated samples (solrl_core/stages/pool_scoring.py)."""

    overlap: bool = Field(
        True, description="score each committed sampling batch on a background thread while the next one samples "
        "(same scores as scoring after sampling; the score stages then only read them)"
    )


class OptimizerConfig(_Strict):
    lr: float = _real(3e-4, "AdamW learning rate of the LoRA weights (official 3e-4; AdamW moves each weight by about "
                      "lr per step whatever the gradient's scale: at 1 a LoRA weight moves by more than its size)",
                      gt=0, le=MAX_LR)
    betas: tuple[float, float] = Field(
        (0.9, 0.999), description="AdamW moment decays (official 0.9, 0.999); each finite, ≥ 0 and < 1 (at 1 a moment "
        "never forgets its start and Adam's bias correction divides by 0)")
    weight_decay: float = _real(1e-4, "AdamW decoupled weight decay (official 1e-4)", ge=0)
    eps: float = _real(1e-8, "AdamW denominator epsilon (official 1e-8)", gt=0)
    grad_clip: float | None = _real(
        None, "clip the gradient's global L2 norm to this; null = the backbone's default (official 1.0, NVlabs/Sana "
        "configs/sol_rl max_grad_norm)", gt=0)

    @field_validator("betas")
    @classmethod
    def _decays(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(math.isfinite(b) and 0 <= b < 1 for b in betas):
            raise ValueError(f"train.optimizer.betas: each decay must be ≥ 0 and < 1 (got {list(betas)})")
        return betas


class TrainConfig(_Strict):
    adapter: Literal["lora", "full"] = Field(
        "lora", description="what the update trains: lora = LoRA adapters θ, θ_old on the frozen W0 (the official "
        "setting); full = every weight of the transformer (θ and θ_old whole float32 copies beside W0, sharded with "
        "FSDP2 over the update's processes, saved with torch.distributed.checkpoint; solrl_core/rl/full_policy.py), "
        "at a learning rate about 10x below LoRA's")
    lora_rank: int = _count(32, 1, MAX_RANK, "rank r of the LoRA adapters θ and θ_old (official 32)")
    lora_alpha: float = _real(
        64.0, "LoRA scale numerator: the update is (alpha / rank)·BA (official 64, so a scale of 2)", gt=0)
    lora_targets: list[str] | None = Field(
        None, description="modules that get adapters (PEFT target_modules: a module whose name ends with one of "
        "these); null = the backbone's official list (docs/backbones.md)"
    )
    experts: list[str] | None = Field(
        None, description="a backbone of several experts (wan22: transformer for the high-noise steps, transformer_2 "
        "for the low-noise ones): the experts whose layers get the LoRA targets (θ, θ_old and the EMA per trained "
        "expert); null = the backbone's default (wan22: both, as Flow-Factory's Wan2.2 LoRA recipe)")
    timestep_fraction: float = _real(
        0.6, "DiffusionNFT: share of the sampling schedule's times trained per sample, drawn at random (official 0.6 "
        "SANA / SD3.5, 0.4 FLUX)", gt=0, le=1)
    micro_batch: int = _count(8, 1, MAX_BATCH, "(sample, time) pairs per forward/backward, per process")
    processes: int = _count(1, 1, MAX_PROCESSES, "update processes per node (torchrun --nproc-per-node, data "
                            "parallel); official 8 GPUs")
    nodes: int = _count(1, 1, MAX_NODES, "machines the update spans (torchrun --nnodes). With more than 1, the "
                        "machine that runs the update stage starts torchrun for itself, each other machine runs `solrl "
                        "update-node --run-dir DIR` (one torchrun for every iteration's update), and all see the run "
                        "directory (shared filesystem or S3)")
    rdzv_endpoint: str | None = Field(None, description="HOST:PORT where the nodes meet (torchrun --rdzv-endpoint, "
                                      "c10d rendezvous): a free port on one training machine, usually the one that "
                                      "runs the stage, reachable from the others; needed when nodes > 1")
    dist_backend: Literal["gloo", "nccl"] = Field("gloo", description="torch.distributed backend: gloo, nccl (GPUs)")
    optimizer_steps: int = _count(1, 1, MAX_ITERATIONS, "optimizer steps per iteration (official 1)")
    optimizer: OptimizerConfig = Field(OptimizerConfig(), description="AdamW settings of the update")
    old_eta_rate: float = _real(
        0.001, "growth per optimizer step s of η in the sampling policy's soft update θ_old ← η·θ_old + (1 − η)·θ, η = "
        "min(old_eta_rate·s, old_eta_max) (official 0.001, docs/method.md)", ge=0)
    old_eta_max: float = _real(
        0.5, "cap of that η: 0 = θ_old copies θ after every step, 1 = θ_old never moves (official 0.5)", ge=0, le=1)
    ema_max_decay: float = _real(
        0.9, "cap of the decay of the EMA of θ used for evaluation: decay = min((1 + s) / (10 + s), ema_max_decay) at "
        "optimizer step s (official 0.9)", ge=0, le=1)

    @model_validator(mode="after")
    def _rendezvous(self) -> TrainConfig:
        if self.nodes > 1:
            host, _, port = (self.rdzv_endpoint or "").rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"train.rdzv_endpoint: with train.nodes = {self.nodes} give HOST:PORT where the "
                                 f"nodes meet (e.g. 10.0.0.1:29400), got {excerpt(self.rdzv_endpoint)}")
        return self


# the group-relative advantages every objective clips (solrl_core/rl/advantages.py)
ADVANTAGES = "advantages (reward − prompt mean) / (std + 1e-4, advantage_std's) are clipped to ±this"


class _AdvantageSettings(_Strict):
    """What every objective's group-relative advantages share (solrl_core/rl/advantages.py)."""

    advantage_std: Literal["global", "prompt"] = Field(
        "global", description="the std the centred rewards are divided by: global = of every reward of the iteration "
        "(NVlabs/Sana sol_rl; flow_grpo config/grpo.py pickscore_sd3 sample.global_std True; AWM's pickscore "
        "configs), prompt = of the prompt's own group (flow_grpo's general_ocr_wan2_1 and X-GenGroup/Flow-Factory's "
        "Wan 2.1 GRPO recipe: global_std false)")

    def rollout_noise_level(self) -> float:
        """The noise level of the SDE the objective samples its rollouts with; 0 = the ODE (the config checks read
        it here, without the objective's torch code)."""
        return 0.0

    def schedule_problem(self, steps: int) -> str | None:
        """One line saying what of these settings a `steps`-step rollout cannot hold; None when it holds them."""
        return None


class DiffusionNFTSettings(_AdvantageSettings):
    """The DiffusionNFT loss (solrl_core/rl/nft_loss.py): the method's reference objective."""

    beta: float = _real(
        1.0, "β of the DiffusionNFT loss: how far the implicit positive / negative policies v± = v_old ± β·(v − v_old) "
        "step from θ_old; the loss is divided by it (official 1.0, NVlabs/Sana configs/sol_rl `config.beta`)", gt=0)
    adv_clip: float = _real(
        5.0, ADVANTAGES + "; the optimality is r = clip(0.5 + A / (2·adv_clip), 0, 1) and the policy loss is scaled "
        "by it (official 5)", gt=0)
    kl_weight: float = _real(
        1e-4, "weight of the mean ‖v − v_ref‖² term that keeps the policy near the base model W0 (adapters off); 0 = "
        "none (official 1e-4, NVlabs/Sana configs/sol_rl `config.train.beta`)", ge=0)


class FlowGRPOSettings(_AdvantageSettings):
    """Flow-GRPO (solrl_core/rl/flow_grpo.py): rollouts on an SDE, the clipped-ratio loss on its log-probabilities.
    Defaults from yifan123/flow_grpo config/base.py and config/grpo.py (`pickscore_sd3`)."""

    noise_level: float = _real(
        0.7, "a of the SDE's scale a·sqrt(σ / (1 − σ)) on the window's steps (flow_grpo config/base.py "
        "sample.noise_level 0.7)", gt=0)
    clip_range: float = _real(
        1e-4, "ε of the clipped ratio clip(exp(log p_θ − log p_old), 1 − ε, 1 + ε) (flow_grpo config/base.py "
        "train.clip_range 1e-4)", gt=0, lt=1)
    adv_clip: float = _real(
        5.0, ADVANTAGES + " (flow_grpo config/base.py train.adv_clip_max 5)", gt=0)
    kl_weight: float = _real(
        0.01, "β of the KL term mean‖μ_θ − μ_ref‖² / (2 s²) to the reference policy (adapters off); 0 = none and no "
        "reference forward (flow_grpo config/grpo.py pickscore_sd3 train.beta 0.01)", ge=0)
    window_start: StrictInt | list[StrictInt] = Field(
        0, description="first SDE step of a rollout, the steps before it are ODE steps; a list = each "
        "iteration draws one of them from the run seed, explore and regenerate alike (Flow-GRPO-Fast / MixGRPO "
        f"windows; flow_grpo: 0; Flow-Factory's sde_steps: [1, 2, 3]); 0 to {MAX_STEPS:,}")
    window_size: int | None = _count(
        None, 1, MAX_STEPS, "SDE steps from window_start, ODE after them, every one of them trained (Flow-GRPO-Fast: "
        "flow_grpo scripts/train_sd3_fast.py trains sample.sde_window_size steps, its Fast configs 2 or 3; "
        "Flow-Factory num_sde_steps); null = to the last step (flow_grpo config/base.py: every step)")
    timestep_fraction: float = _real(
        0.99, "with window_size null: the window's first int(steps·this) steps are trained, in order (flow_grpo "
        "scripts/train_sd3.py, config/grpo.py 0.99: 9 of 10 steps); a window of window_size steps trains all of them",
        gt=0, le=1)

    def rollout_noise_level(self) -> float:
        return self.noise_level

    def schedule_problem(self, steps: int) -> str | None:
        starts = self.window_start if isinstance(self.window_start, list) else [self.window_start]
        last = max(starts) + (self.window_size or 1)
        if last > steps:
            return (f"objective.flow_grpo: a window from step {max(starts)} of window_start {self.window_start} with "
                    f"window_size {self.window_size} reaches step {last - 1}, past the {steps} steps the rollouts "
                    f"sample; keep window_start + window_size within {steps}")
        return None

    @field_validator("window_start")
    @classmethod
    def _starts(cls, value: int | list[int]) -> int | list[int]:
        starts = value if isinstance(value, list) else [value]
        if not starts or any(not 0 <= v <= MAX_STEPS for v in starts):
            raise ValueError(f"objective.flow_grpo.window_start: give a step from 0 to {MAX_STEPS:,} or a non-empty "
                             f"list of them, got {value}")
        return value


class AWMSettings(_AdvantageSettings):
    """Advantage-weighted matching (solrl_core/rl/awm_loss.py): the flow-matching error of the final samples as a
    log-likelihood, weighted by the advantage. Defaults from scxue/advantage_weighted_matching config/dgx_awm.py
    (`pickscore_sd3_no_cfg_1node`) and config/base_awm.py."""

    times_per_sample: int = _count(6, 1, MAX_STEPS, "times each sample trains on, one in each of as many equal "
                                   "strata of its schedule's first steps (dgx_awm.py train.train_timesteps 6)")
    timestep_fraction: float = _real(
        0.9, "the strata cover the schedule's first int(steps·this) steps (dgx_awm.py train.timestep_fraction 0.9)",
        gt=0, le=1)
    ghuber_power: float = _real(
        0.25, "p of the weighting log p = −((e + 1e-10)^p − 1e-10^p)·t / p of the flow-matching error e (dgx_awm.py "
        "train.weighting ghuber, train.ghuber_power 0.25)", gt=0)
    adv_clip: float = _real(
        5.0, ADVANTAGES + " (base_awm.py train.adv_clip_max 5)", gt=0)
    advantage_max: float = _real(
        1.0, "the clipped advantages are rescaled to ±this (dgx_awm.py train.advantage_max 1)", gt=0)
    clip_range: float = _real(
        1.0, "ε of the clipped ratio clip(exp(log p_θ − log p_old), 1 − ε, 1 + ε) (dgx_awm.py train.clip_range 1)",
        gt=0)
    kl_weight: float = _real(
        1e-4, "β of mean‖v − v_ref‖² to the base model W0 (adapters off); 0 = none and no reference forward "
        "(dgx_awm.py pickscore train.beta 1e-4, kl_weight Uniform)", ge=0)
    old_kl_weight: float = _real(
        1.0, "weight of mean‖v − v_old‖² to θ_old, AWM's slowly following adapter (dgx_awm.py train.ema_beta 1, "
        "kl_ema_weight Uniform)", ge=0)
    old_eta_rate: float = _real(
        0.001, "θ_old ← η·θ_old + (1 − η)·θ after each optimizer step s, η = min(rate·s, old_eta_max) (dgx_awm.py "
        "kl_ema_decay_type linear: 0.001·step)", ge=0)
    old_eta_max: float = _real(0.3, "the cap of η (dgx_awm.py train.kl_ema_decay 0.3)", ge=0, lt=1)

    def schedule_problem(self, steps: int) -> str | None:
        covered = int(steps * self.timestep_fraction)
        if covered < 1:
            return (f"objective.awm.timestep_fraction {self.timestep_fraction:g} of the {steps}-step schedule covers no "
                    f"step (int({steps} x {self.timestep_fraction:g}) = 0); raise it to {1 / steps:.3g} or more")
        if self.times_per_sample > covered:
            return (f"objective.awm.times_per_sample ({self.times_per_sample}) is more strata than the {covered} steps "
                    f"they cover (int({steps} x timestep_fraction {self.timestep_fraction:g})); at most {covered}")
        return None


class ObjectiveConfig(_Strict):
    """The RL objective the update trains (solrl_core/rl/objectives.py) and each one's settings."""

    name: str = Field("diffusionnft", description="diffusionnft (the method's), flow_grpo, awm, or a plug-in "
                      "package.module:Class (a subclass of solrl_core.rl.objective_base.Objective)")
    diffusionnft: DiffusionNFTSettings = Field(DiffusionNFTSettings(), description="the DiffusionNFT loss")
    flow_grpo: FlowGRPOSettings = Field(FlowGRPOSettings(), description="Flow-GRPO's SDE and loss")
    awm: AWMSettings = Field(AWMSettings(), description="advantage-weighted matching's loss")
    options: dict[str, Any] = Field(default_factory=dict, description="a plug-in objective's settings")


class EvalConfig(_Strict):
    """Held-out evaluation with the EMA weights: fixed prompts and seeds, full precision."""

    every: int = _count(5, 0, MAX_ITERATIONS, "evaluate after every N iterations (and the last); 0 = never")
    prompts: str = Field("builtin:shapes-test", description="a builtin set, a text or a JSONL file (as prompts.train)")
    split: str | None = Field(
        None, description='JSONL only: evaluate the lines whose "split" field equals this (e.g. test); null = all'
    )
    num_prompts: int = _count(16, 1, MAX_PROMPTS, "the first N prompts of the set (fixed across evaluations)")
    seeds_per_prompt: int = _count(2, 1, MAX_SEEDS, "fixed noise seeds per prompt (presets: 1)")
    steps: int = _count(10, 1, MAX_STEPS, "ODE steps (official eval: 28 FLUX, 40 SD3.5/SANA)")
    batch_size: int = _count(32, 1, MAX_BATCH, "samples per forward batch")
    rewards: dict[str, float] | None = Field(
        None, description="reward name -> weight of the held-out score; null = the training rewards. Weights are "
        "finite and add up to more than 0, as the training rewards'"
    )
    gold: str | None = Field(
        None, description="the gold evaluator: a reward also scored on every evaluation (weight 0, not in the total), "
        "logged as `gold` with `gold_gap` = reward - gold. Train on a learned reward and evaluate with the one it "
        "imitates (embedded_learned with gold: embedded): the learned reward rising while gold does not is reward "
        "hacking; the benchmark compares families on gold when runs have it. null = none"
    )


class AuditConfig(_Strict):
    """Full-fidelity audit: regenerate the whole explore pool at full precision and measure the ranking fidelity of
    the proxy reward over whole prompt groups (solrl_core/stages/audit.py)."""

    every: int = _count(0, 0, MAX_ITERATIONS, "audit iterations whose (iteration + 1) divides by N; 0 = never")


class TrackingConfig(_Strict):
    uri: str | None = Field(None, description="MLflow tracking URI; null = MLFLOW_TRACKING_URI, else "
                            "sqlite:///mlruns.db in the working dir (through the MLflow server of `make server` while "
                            "it serves that file)")
    experiment: str = Field("solrl", description="MLflow experiment the run is logged under")
    grid_prompts: int = _count(2, 0, MAX_PROMPTS, "prompts shown in the best/worst image grid per iteration")


class OrchestrationConfig(_Strict):
    """Where stages run. A stage with a work pool runs as a Prefect deployment run on that pool (a worker started
    with `prefect worker start --pool NAME` picks it up) and the iteration flow waits for it; a stage without one
    runs inside the iteration flow's own process."""

    work_pools: dict[str, str] = Field(
        default_factory=dict, description="stage -> work pool, e.g. {explore: explore-pool, update: train-pool}"
    )
    default_pool: str | None = Field(None, description="pool of the stages not in work_pools; null = in process")
    flow_pool: str = Field("solrl", description="pool of the deployments `solrl deploy` makes for the training flow "
                           "and for stages that have no pool")
    devices: Literal["auto"] | list[str] = Field(
        "auto", description="where sampling and scoring run (explore, regenerate, audit, evaluation, both score "
        "stages): auto = every visible CUDA device when model.device is cuda, else model.device; or a list, e.g. "
        "[cuda:0, cuda:1] or [cpu, cpu]. Several devices: one worker process per device, pinned to it, each "
        "sampling/scoring whole batches; the same artifacts as one device of that type (solrl_core/placement.py)"
    )
    dask_address: str | None = Field(
        None, description="tcp://HOST:PORT of a running Dask scheduler whose workers (one per device, started with "
        "--resources device=1) run the shards; null = a local cluster of one process per entry of `devices`"
    )
    heartbeat_timeout: int = _count(
        120, 45, MAX_SECONDS, "seconds without a heartbeat (sent every 30 s) after which a run on a work pool is "
        "marked Crashed (its worker or machine was lost) and its stage re-run"
    )

    @model_validator(mode="before")
    @classmethod
    def _workers_replaced(cls, data: Any) -> Any:
        if isinstance(data, dict) and "workers" in data:
            raise ValueError("orchestration.workers was replaced by orchestration.devices: list one device per "
                             "worker process, e.g. devices: [cpu, cpu] or [cuda:0, cuda:1]")
        return data

    @model_validator(mode="after")
    def _known_stages(self) -> OrchestrationConfig:
        from solrl_core.run.stage_table import STAGES

        unknown = sorted(set(self.work_pools) - set(STAGES))
        if unknown:
            raise ValueError(f"orchestration.work_pools: unknown stage '{cut(unknown[0])}' (stages: "
                             f"{', '.join(STAGES)})")
        if self.dask_address is not None and not self.dask_address.startswith(("tcp://", "tls://")):
            raise ValueError(f"orchestration.dask_address: expected tcp://HOST:PORT (got "
                             f"'{cut(self.dask_address)}')")
        return self

    def pool_for(self, stage: str) -> str | None:
        """The work pool `stage` runs on, or None to run it in the iteration flow's process."""
        return self.work_pools.get(stage) or self.default_pool


MAX_NAME_BYTES = 200  # a run name is a directory's name: well inside the 255 bytes file systems allow


def plain_name_problem(name: str) -> str | None:
    """What keeps `name` from being one plain path component (a directory of its own, the MLflow run's name), or
    None: empty, a separator, "." or "..", surrounding spaces, a control or format character (a NUL, a right-to-left
    override), or more than MAX_NAME_BYTES bytes."""
    odd = next((c for c in name if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn")), None)
    if not name or name in (".", ".."):
        return "is empty or . or .."
    if "/" in name or "\\" in name:
        return "holds a path separator"
    if name != name.strip():
        return "begins or ends with a space"
    if odd is not None:
        return f"holds the control or format character U+{ord(odd):04X}"
    if len(name.encode()) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    return None


class RunConfig(_Strict):
    name: str = Field("run", description="run name (default: the config file's stem); names the run directory "
                      "runs/<name>/ and the MLflow run: one plain path component (no separator, no . or .., no "
                      f"control character, at most {MAX_NAME_BYTES} bytes)")
    family: Family = Field(
        "sol_rl", description="which method the config is (solrl_core/config/families.py): baseline, naive_scaling, "
        "naive_quant or sol_rl; checked against explore.precision, select.mode and regenerate.enabled"
    )
    seed: int = _count(0, 0, MAX_SEED, "root of every random draw (prompts, noise seeds, selection, timesteps); the "
                       "noise seeds of candidate c of prompt slot p do not depend on explore.seeds_per_prompt, so "
                       "families of one seed share their noise (solrl_core/stages/draws.py)")
    iterations: int = _count(10, 1, MAX_ITERATIONS, "RL iterations to train (each one optimizer_steps steps)")
    model: ModelConfig = Field(ModelConfig(), description="the backbone: adapter, weights, device, resolution")
    guidance: GuidanceConfig = Field(GuidanceConfig(), description="guidance scales per phase (official 1.0: none)")
    prompts: PromptsConfig = Field(PromptsConfig(), description="the training prompts")
    quant: QuantConfig = Field(QuantConfig(), description="which Linear layers the explore copy quantizes, and how")
    explore: ExploreConfig = Field(ExploreConfig(), description="the low-precision sampling of N seeds per prompt")
    select: SelectConfig = Field(SelectConfig(), description="which K of the N seeds per prompt are kept")
    regenerate: RegenerateConfig = Field(RegenerateConfig(), description="full-precision sampling of the kept seeds")
    rewards: dict[str, float] = Field(
        default_factory=lambda: {"embedded": 1.0},
        description="reward name -> weight of the training reward (`solrl rewards list`; official: one reward, 1.0). "
        "Weights are finite and add up to more than 0; one may be negative (a penalty) or 0 (scored, not trained on)"
    )
    score: ScoreConfig = Field(ScoreConfig(), description="reward scoring of the sampled images")
    reward_models: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per-reward weights location etc., e.g. {pickscore: {path: ...}}"
    )
    objective: ObjectiveConfig = Field(ObjectiveConfig(), description="the RL objective and its settings")
    train: TrainConfig = Field(TrainConfig(), description="the update: LoRA, optimizer, processes")
    eval: EvalConfig = Field(EvalConfig(), description="held-out evaluation with the EMA weights")
    audit: AuditConfig = Field(AuditConfig(), description="full-fidelity audit of the explore's ranking")
    tracking: TrackingConfig = Field(TrackingConfig(), description="MLflow tracking")
    orchestration: OrchestrationConfig = Field(OrchestrationConfig(), description="where the stages run (Prefect "
                                               "work pools, devices, Dask)")

    def evaluation_rewards(self) -> dict[str, float]:
        """Reward name -> weight an evaluation scores with: `eval.rewards` (else the training rewards), plus the gold
        evaluator at weight 0 (scored and reported, not added to the total)."""
        weights = dict(self.eval.rewards or self.rewards)
        if self.eval.gold is not None:
            weights.setdefault(self.eval.gold, 0.0)
        return weights

    @field_validator("family", mode="before")
    @classmethod
    def _family_by_its_current_name(cls, value: Any) -> Any:
        """An old family name (`diffusionnft`) still works, with a one-line notice."""
        return renamed.family(value)

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        problem = plain_name_problem(name)
        if problem:
            raise ValueError(f"name: {excerpt(name)} {problem}; a run name is one plain path component (it names "
                             "the run directory runs/<name>/), e.g. my-run_2")
        return name

    @model_validator(mode="after")
    def _check_shapes(self) -> RunConfig:
        if not self.rewards:
            raise ValueError("rewards: name at least one reward")
        _check_weights("rewards", self.rewards)
        _check_weights("eval.rewards", self.eval.rewards)
        if any(precision == "auto" for precision, _ in self.explore.guardrail.ladder):
            raise ValueError("explore.guardrail.ladder: name concrete precisions (not auto)")
        if self.train.adapter == "full":
            _check_full_fine_tuning(self)
        return self


def _check_full_fine_tuning(cfg: RunConfig) -> None:
    """What `train.adapter: full` cannot do (yet), each refused naming its key."""
    if cfg.quant.lora_branch:
        raise ValueError("quant.lora_branch: a LoRA branch beside the quantized W0 needs LoRA; under train.adapter: "
                         "full the explore copy is θ_old quantized whole; set quant.lora_branch: false")
    if cfg.explore.sibling.path and cfg.explore.sibling.policy == "delta":
        raise ValueError("explore.sibling.policy: delta adds θ_old's low-rank update to the sibling; under "
                         "train.adapter: full there is none; set explore.sibling.policy: frozen")


def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it: ~15x faster

# The most values (scalars, lists, mappings) a YAML text may stand for once its aliases are expanded. An alias (*a)
# repeats the value of an anchor (&a) without copying it, so 362 bytes of nested aliases (a "billion laughs") stand
# for 10^9 values: harmless while shared, but merging, validating or printing the config walks every one of them. A
# real config (or a run's frozen config.yaml) has hundreds.
MAX_YAML_VALUES = 100_000
MAX_YAML_DEPTH = 1000  # nesting of flow collections; libyaml's composer overflows the C stack near 50,000


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """How many values the node tree under `root` stands for with its aliases expanded, counted over the shared nodes
    once each (linear in the text); stops at the first count over `limit` (a recursive alias counts as over)."""
    sizes: dict[int, int] = {}
    ancestors: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        children = ([c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        if children_done:
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
            ancestors.discard(id(node))
            if sizes[id(node)] > limit:
                return sizes[id(node)]
        elif id(node) in ancestors:  # an alias inside its own anchor: infinitely many values
            return limit + 1
        elif id(node) not in sizes:
            ancestors.add(id(node))
            stack.append((node, True))
            stack += [(c, False) for c in children]
    return sizes[id(root)]


def _duplicate_key(root: yaml.Node) -> yaml.Node | None:
    """The first key written twice in one mapping under `root` (YAML keeps the last silently), or None."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[tuple[str, str]] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if (key.tag, key.value) in keys:
                        return key
                    keys.add((key.tag, key.value))
                stack += [key, value]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
    return None


def load_yaml(text: str, source: str = "YAML") -> Any:
    """`yaml.safe_load`, with libyaml when available (each stage task reads the run's config.yaml). A ConfigError
    naming `source` when the aliases expand to more than MAX_YAML_VALUES values (checked before anything expands),
    or when a mapping writes a key twice (YAML would keep the last without a word)."""
    if text.count("[") + text.count("{") > MAX_YAML_DEPTH and _flow_depth(text) > MAX_YAML_DEPTH:
        raise ConfigError(f"{source}: its brackets nest more than {MAX_YAML_DEPTH:,} levels deep (the YAML parser "
                          "would overflow its stack); no config nests that deep: check the file")
    loader = _YamlLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        twice = _duplicate_key(node)
        if twice is not None:
            raise ConfigError(f"{source}: line {twice.start_mark.line + 1}: the key '{cut(twice.value)}' is written "
                              "twice in one mapping (YAML would keep the last without a word); keep one")
        # Without a "*" the text has no alias: nothing to count (the common case, kept at libyaml's speed).
        if "*" in text and _expanded_size(node, MAX_YAML_VALUES) > MAX_YAML_VALUES:
            raise ConfigError(f"{source}: its aliases (*name) expand to more than {MAX_YAML_VALUES:,} values (an alias "
                              "bomb, or an alias inside its own anchor); write the values out, or repeat fewer")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _flow_depth(text: str) -> int:
    """The deepest nesting of YAML flow collections ([...] and {...}) in `text`, outside quoted strings and comments
    (an upper bound is enough: it only decides whether to parse)."""
    depth = deepest = 0
    quote = None
    previous = "\n"
    i = 0
    while i < len(text):
        char = text[i]
        if quote == "'":
            if char == "'":
                if text[i + 1:i + 2] == "'":
                    i += 1
                else:
                    quote = None
        elif quote == '"':
            if char == "\\":
                i += 1
            elif char == '"':
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and previous in " \t\n":
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            previous = "\n"
            continue
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
        previous = char
        i += 1
    return deepest


def _parse_mapping(text: str, source: str, empty_hint: str) -> dict:
    """The YAML `text` as a mapping of keys; ConfigError naming `source` when it is not one."""
    try:
        data = load_yaml(text, source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{source}:{where} is not valid YAML") from None
    if data is None:
        raise ConfigError(empty_hint)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys (key: value lines), not a "
                          f"{_yaml_kind(data)}")
    return data


def _yaml_kind(value: Any) -> str:
    return "list" if isinstance(value, list) else f"single value ({excerpt(value, 40)})"


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (['a', 'b', 'c'], yaml-parsed value)."""
    if "=" not in text:
        raise ConfigError(f"override '{cut(text)}' must look like key=value (e.g. train.optimizer.lr=1e-4)")
    key, raw = text.split("=", 1)
    if not key.strip():
        raise ConfigError(f"override '{cut(text)}' has an empty key")
    try:
        value = load_yaml(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    data = dict(data)
    for text in overrides:
        keys, value = parse_override(text)
        node = data
        for i, key in enumerate(keys[:-1]):
            child = node.get(key)
            if child is None:
                child = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"override '{cut(text)}': '{cut('.'.join(keys[: i + 1]))}' is not a section")
            node[key] = dict(child)
            node = node[key]
        node[keys[-1]] = value
    return data


# keys that moved: an old config names the new place in its error
MOVED_KEYS = {f"train.{key}": f"objective.diffusionnft.{key}" for key in ("beta", "adv_clip", "kl_weight")}


def format_validation_error(exc: ValidationError) -> str:
    """The first error of a pydantic validation, as one line naming the key."""
    err = exc.errors()[0]
    key = cut(".".join(str(p) for p in err["loc"]) or "config")
    if err["type"] == "extra_forbidden":
        moved = MOVED_KEYS.get(key)
        return f"'{key}' is now '{moved}'" if moved else f"unknown key '{key}'"
    if err["type"] == "value_error":
        return one_line(err["msg"].removeprefix("Value error, "))
    return f"'{key}': {cut(err['msg'])} (got {excerpt(err.get('input'))})"


TINY_OVERRIDES_FILE = "solrl_tiny.yaml"


def dump_config(cfg: RunConfig) -> str:
    """`cfg` as YAML, every credential inside a URL redacted (solrl_core/redaction.py): what is frozen into a run
    directory, sent to a deployment or printed; a later command finds the credentials again (`with_credentials`)."""
    from solrl_core.redaction import redact_tree

    return yaml.safe_dump(redact_tree(cfg.model_dump(mode="json")), sort_keys=False)
