"""Typed run configuration: YAML -> validated pydantic objects.

Unknown keys and bad values are rejected with a message naming the key, and so are settings that contradict the
config's `family` (solrl_core/families.py). Every field carries a description: `solrl config --explain` and
docs/config.md are generated from them (solrl_core/config_explain.py). A config may start from other files with
`extends: other.yaml` or `extends: [a.yaml, b.yaml, ...]` (paths relative to the extending file; the list merges in
order, later files win; mappings merge key by key, the extending file wins over all of them). Where a command takes
a CONFIG, it is a file or the name of a config shipped in the package (`solrl presets` lists them).
`--set a.b=value` overrides are parsed as YAML scalars and applied before validation.

Tiny models: when `model.path` is a local directory holding `solrl_tiny.yaml` (written by `solrl make-tiny`), its
values are merged over the config after `extends` and `--set`, and the `--set` overrides are applied once more, so
the command line still wins. This makes an official preset runnable on a CPU against a tiny model.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from solrl_core.errors import ConfigError, SolrlError
from solrl_core.families import Family, family_conflict
from solrl_core.packaged_configs import resolve_config
from solrl_core.userfiles import read_text

Precision = Literal["nvfp4", "nvfp4_emulated", "fp8", "fp8_emulated", "bf16", "fp32", "auto"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# Upper bounds of the integer settings. Far above any real run (the official ones: 48 prompts x 96 seeds, 28-40 ODE
# steps, batches of tens, hundreds of iterations on up to hundreds of GPUs), yet low enough that each value, and the
# counts the code forms from them (rows of a pool: prompts x seeds; optimizer steps: iterations x steps per
# iteration), fit the 64-bit integers of torch, zarr and Prefect's database: `iterations: 100000000000000000000` once
# made every Prefect listing of the server fail ("Integer exceeds 64-bit range"). A value past them is a typo.
MAX_ITERATIONS = 1_000_000  # iterations, optimizer steps per iteration, eval/audit periods, patience
MAX_SEEDS = 100_000  # seeds per prompt (explore and evaluation), K
MAX_PROMPTS = 100_000  # prompts per iteration, evaluation prompts, prompts of the grid
MAX_STEPS = 10_000  # ODE steps
MAX_BATCH = 65_536  # batch sizes, micro-batches, latents per VAE decode
MAX_RANK = 65_536  # LoRA rank (at most a layer's width)
MAX_WIDTH = 1_000_000  # a layer width, text tokens
MAX_SIDE = 65_536  # image side in pixels
MAX_PROCESSES = 1_024  # update processes per machine
MAX_NODES = 65_536  # machines of the update
MAX_SECONDS = 7 * 24 * 3600  # a timeout: a week
MAX_SEED = 2**63 - 1  # the largest int64


def _count(default: int | None, low: int, high: int, description: str, **kwargs: Any) -> Any:
    """An integer setting from `low` to `high`, which the end of its description states. Only integers: strict, so
    `true` or `2.5` (or `10.0`) is refused, not read as 1, 2 or 10."""
    return Field(default, ge=low, le=high, strict=True, description=f"{description}; {low} to {high:,}", **kwargs)


BackboneKind = str
"""A registered kind (solrl_core/backbones/specs/) or "package.module:Class" (a plug-in adapter), checked by
solrl_core.backbones.registry.check_kind."""
SamplerName = Literal["euler", "dpmpp_2m"]


class ModelConfig(_Strict):
    kind: BackboneKind = Field(
        "embedded", description="backbone adapter: a registered kind (embedded, flux1, sd35, sana, ...: one spec each "
        "in solrl_core/backbones/specs/) or `package.module:Class` naming a Backbone subclass of your own package "
        "(docs/extending.md)")
    path: str | None = Field(
        None, description="local diffusers directory or hub id; null = the shipped embedded model (embedded only)"
    )
    device: str = Field("cpu", description="torch device of sampling, scoring and the update: cpu, cuda, cuda:1, ...")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="weights of the transformer and encoders (bfloat16 on GPUs); the LoRA θ, θ_old, their "
        "optimizer state and EMA stay float32 whatever this is"
    )
    resolution: int | None = _count(None, 8, MAX_SIDE, "image side in pixels; null = the backbone's default")
    sampler: SamplerName | None = Field(None, description="ODE solver; null = the backbone's default")
    max_sequence_length: int | None = _count(None, 1, MAX_WIDTH, "text tokens (T5/Gemma); null = default")
    gradient_checkpointing: bool = Field(False, description="recompute activations in the update (saves memory)")
    decode_chunk: int = _count(8, 1, MAX_BATCH, "latents decoded per VAE call")
    release_text_encoders: bool = Field(
        False, description="drop the text encoders from the device once every prompt of the run is cached"
    )
    allow_downloads: bool = Field(False, description="let from_pretrained reach the hub (off: local files only)")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        from solrl_core.backbones.registry import check_kind

        try:
            return check_kind(kind)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None


class GuidanceConfig(_Strict):
    """Guidance scales. 1.0 = none. FLUX.1-dev's distilled guidance embedding takes the value directly; the others
    use classifier-free guidance with the empty prompt when the scale is above 1."""

    rollout: float = Field(1.0, ge=0, description="scale of the explore and regenerate sampling (official 1.0)")
    train: float = Field(1.0, ge=0, description="scale of the velocities inside the update (official 1.0)")
    eval: float = Field(1.0, ge=0, description="scale of the held-out evaluation's sampling (official 1.0)")


class PromptsConfig(_Strict):
    train: str = Field(
        "builtin:shapes-train",
        description="builtin:shapes-train | builtin:shapes-test | a text file (one prompt per line, # comments) | "
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
    floor: float = Field(0.5, ge=-1, le=1, description="Spearman below this counts as a bad iteration")
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
                                 f"(got {steps!r})")
        return ladder


class ExploreConfig(_Strict):
    precision: Precision = Field(
        "auto", description="what the explore copy's Linear layers run in: nvfp4 / fp8 = real 4-/8-bit GEMMs "
        "(Blackwell / sm_89+), nvfp4_emulated / fp8_emulated = the same numerics anywhere (no speed-up), bf16, fp32 = "
        "nothing replaced (full precision); auto = nvfp4 on Blackwell, fp8 on Hopper/Ada, else nvfp4_emulated "
        "(official NVFP4; solrl_core/quant/backends.py)"
    )
    steps: int = _count(6, 1, MAX_STEPS, "ODE steps of the explore copy (official 6)")
    seeds_per_prompt: int = _count(16, 1, MAX_SEEDS, "N, candidates per prompt (official 96)")
    batch_size: int = _count(32, 1, MAX_BATCH, "candidates per forward batch; also the commit unit of the pool")
    keep_latents: bool = Field(
        True, description="store each candidate's final latent in the pool (always kept when regenerate is off: the "
        "update trains on them)"
    )
    guardrail: GuardrailConfig = Field(GuardrailConfig(), description="ranking-fidelity guardrail (off by default)")


class SelectConfig(_Strict):
    mode: str = Field(
        "best_worst", description="which K seeds per prompt train: best_worst = K/2 highest + K/2 lowest proxy reward "
        "(official); top = K highest; random; extremes_random = K/4 best + K/4 worst + the rest at random; all = "
        "every seed (diffusionnft); or package.module:Class, a SelectionRule of your own (solrl_core/rl/selection.py)"
    )
    k: int = _count(4, 1, MAX_SEEDS, "K, seeds kept per prompt (official 24)")

    @field_validator("mode")
    @classmethod
    def _known_mode(cls, mode: str) -> str:
        from solrl_core.rl.selection import selection_rule

        try:
            selection_rule(mode)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return mode

    def kept_per_prompt(self, seeds_per_prompt: int) -> int:
        """Seeds trained on per prompt: K, or every explored seed for a rule that keeps them all."""
        from solrl_core.rl.selection import selection_rule

        return seeds_per_prompt if selection_rule(self.mode).every_seed else self.k


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
    lr: float = Field(3e-4, gt=0, description="AdamW learning rate of the LoRA weights (official 3e-4)")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW moment decays (official 0.9, 0.999)")
    weight_decay: float = Field(1e-4, ge=0, description="AdamW decoupled weight decay (official 1e-4)")
    eps: float = Field(1e-8, gt=0, description="AdamW denominator epsilon (official 1e-8)")
    grad_clip: float | None = Field(
        None, gt=0, description="clip the gradient's global L2 norm to this; null = the backbone's default (official "
        "1.0, NVlabs/Sana configs/sol_rl max_grad_norm)"
    )


class TrainConfig(_Strict):
    lora_rank: int = _count(32, 1, MAX_RANK, "rank r of the LoRA adapters θ and θ_old (official 32)")
    lora_alpha: float = Field(
        64.0, gt=0, description="LoRA scale numerator: the update is (alpha / rank)·BA (official 64, so a scale of 2)"
    )
    lora_targets: list[str] | None = Field(
        None, description="modules that get adapters (PEFT target_modules: a module whose name ends with one of "
        "these); null = the backbone's official list (docs/backbones.md)"
    )
    timestep_fraction: float = Field(
        0.6, gt=0, le=1, description="share of the sampling schedule's times trained per sample, drawn at random "
        "(official 0.6 SANA / SD3.5, 0.4 FLUX)"
    )
    beta: float = Field(
        1.0, gt=0, description="β of the DiffusionNFT loss: how far the implicit positive / negative policies v± = "
        "v_old ± β·(v − v_old) step from θ_old; the loss is divided by it (official 1.0, NVlabs/Sana configs/sol_rl "
        "`config.beta`)"
    )
    adv_clip: float = Field(
        5.0, gt=0, description="advantages (reward − prompt mean) / (iteration std + 1e-4) are clipped to ±this; the "
        "optimality is r = clip(0.5 + A / (2·adv_clip), 0, 1) and the policy loss is scaled by it (official 5)"
    )
    kl_weight: float = Field(
        1e-4, ge=0, description="weight of the mean ‖v − v_ref‖² term that keeps the policy near the base model W0 "
        "(adapters off); 0 = none (official 1e-4, NVlabs/Sana configs/sol_rl `config.train.beta`)"
    )
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
    old_eta_rate: float = Field(
        0.001, ge=0, description="growth per optimizer step s of η in the sampling policy's soft update θ_old ← "
        "η·θ_old + (1 − η)·θ, η = min(old_eta_rate·s, old_eta_max) (official 0.001, docs/method.md)"
    )
    old_eta_max: float = Field(
        0.5, ge=0, le=1, description="cap of that η: 0 = θ_old copies θ after every step, 1 = θ_old never moves "
        "(official 0.5)"
    )
    ema_max_decay: float = Field(
        0.9, ge=0, le=1, description="cap of the decay of the EMA of θ used for evaluation: decay = min((1 + s) / (10 "
        "+ s), ema_max_decay) at optimizer step s (official 0.9)"
    )

    @model_validator(mode="after")
    def _rendezvous(self) -> TrainConfig:
        if self.nodes > 1:
            host, _, port = (self.rdzv_endpoint or "").rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"train.rdzv_endpoint: with train.nodes = {self.nodes} give HOST:PORT where the "
                                 f"nodes meet (e.g. 10.0.0.1:29400), got {self.rdzv_endpoint!r}")
        return self


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
        None, description="reward name -> weight of the held-out score; null = the training rewards"
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
        from solrl_core.stages.table import STAGES

        unknown = sorted(set(self.work_pools) - set(STAGES))
        if unknown:
            raise ValueError(f"orchestration.work_pools: unknown stage '{unknown[0]}' (stages: {', '.join(STAGES)})")
        if isinstance(self.devices, list):
            from solrl_core.placement import check_device_list

            check_device_list(self.devices)
        if self.dask_address is not None and not self.dask_address.startswith(("tcp://", "tls://")):
            raise ValueError(f"orchestration.dask_address: expected tcp://HOST:PORT (got '{self.dask_address}')")
        return self

    def pool_for(self, stage: str) -> str | None:
        """The work pool `stage` runs on, or None to run it in the iteration flow's process."""
        return self.work_pools.get(stage) or self.default_pool


class RunConfig(_Strict):
    name: str = Field("run", description="run name (default: the config file's stem); names the run directory "
                      "runs/<name>/ and the MLflow run")
    family: Family = Field(
        "sol_rl", description="which method the config is (solrl_core/families.py): diffusionnft, naive_scaling, "
        "naive_quant or sol_rl; checked against explore.precision, select.mode and regenerate.enabled"
    )
    seed: int = _count(0, 0, MAX_SEED, "root of every random draw (prompts, noise seeds, selection, timesteps); the "
                       "noise seeds drawn from it must fit 64 bits as well (checked when the run starts)")
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
        description="reward name -> weight of the training reward (`solrl rewards list`; official: one reward, 1.0)"
    )
    score: ScoreConfig = Field(ScoreConfig(), description="reward scoring of the sampled images")
    reward_models: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per-reward weights location etc., e.g. {pickscore: {path: ...}}"
    )
    train: TrainConfig = Field(TrainConfig(), description="the update: LoRA, DiffusionNFT loss, optimizer, processes")
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

    @model_validator(mode="after")
    def _check_shapes(self) -> RunConfig:
        from solrl_core.rl.selection import selection_rule

        rule = selection_rule(self.select.mode)
        if not rule.every_seed and self.select.k > self.explore.seeds_per_prompt:
            raise ValueError(
                f"select.k ({self.select.k}) exceeds explore.seeds_per_prompt ({self.explore.seeds_per_prompt})"
            )
        if rule.even_k and self.select.k % 2:
            raise ValueError(f"select.k must be even for {rule.name}, got {self.select.k}")
        if not self.rewards:
            raise ValueError("rewards: name at least one reward")
        from solrl_core.errors import SolrlError
        from solrl_core.rewards.registry import check_reward_names, parse_reward_models

        try:
            parse_reward_models(self.reward_models)
            if self.eval.gold is not None:
                check_reward_names([self.eval.gold])
        except SolrlError as exc:
            raise ValueError(("eval.gold: " if "reward_models" not in str(exc) else "") + str(exc)) from None
        if any(precision == "auto" for precision, _ in self.explore.guardrail.ladder):
            raise ValueError("explore.guardrail.ladder: name concrete precisions (not auto)")
        conflict = family_conflict(self)
        if conflict:
            raise ValueError(conflict)
        return self


def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it: ~15x faster


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, with libyaml when available (each stage task reads the run's config.yaml)."""
    return yaml.load(text, Loader=_YamlLoader)


def _parse_mapping(text: str, source: str, empty_hint: str) -> dict:
    """The YAML `text` as a mapping of keys; ConfigError naming `source` when it is not one."""
    try:
        data = load_yaml(text)
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


def _read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: 'extends' forms a cycle")
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    try:
        text = read_text(path, "config")
    except SolrlError as exc:
        raise ConfigError(str(exc)) from None
    data = _parse_mapping(text, str(path), f"config file {path} is empty; write the settings to change (e.g. "
                          "extends: demo.yaml plus the keys that differ)")
    parents = data.pop("extends", None)
    if parents is None:
        return data
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise ConfigError(f"{path}: 'extends' must be a file name or a list of file names")
    base: dict = {}
    for parent in parents:  # in order: later files win
        base = _deep_merge(base, _read_yaml(path.parent / parent, seen + (path,)))
    return _deep_merge(base, data)


def _yaml_kind(value: Any) -> str:
    return "list" if isinstance(value, list) else f"single value ({value!r:.40})"


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (['a', 'b', 'c'], yaml-parsed value)."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like key=value (e.g. train.optimizer.lr=1e-4)")
    key, raw = text.split("=", 1)
    if not key.strip():
        raise ConfigError(f"override '{text}' has an empty key")
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
                raise ConfigError(f"override '{text}': '{'.'.join(keys[: i + 1])}' is not a section")
            node[key] = dict(child)
            node = node[key]
        node[keys[-1]] = value
    return data


def _format_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "config"
    if err["type"] == "extra_forbidden":
        return f"unknown key '{key}'"
    if err["type"] == "value_error":
        return err["msg"].removeprefix("Value error, ")
    return f"'{key}': {err['msg']} (got {err.get('input')!r})"


def validate_config(data: dict, source: str = "config") -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_format_error(exc)}") from None


TINY_OVERRIDES_FILE = "solrl_tiny.yaml"


def tiny_overrides_file(data: dict) -> Path | None:
    """`model.path`/solrl_tiny.yaml when model.path is a local directory holding one (see `solrl make-tiny`)."""
    model = data.get("model")
    path = model.get("path") if isinstance(model, dict) else None
    if not isinstance(path, str) or not path:
        return None
    candidate = Path(path).expanduser() / TINY_OVERRIDES_FILE
    return candidate if candidate.is_file() else None


def apply_tiny_overrides(data: dict, overrides: list[str]) -> dict:
    """Merge the tiny model's run overrides over `data`, then the `--set` overrides again (the command line wins).
    Prints one line to stderr when it does. A tiny model of another backbone kind is a ConfigError."""
    tiny_file = tiny_overrides_file(data)
    if tiny_file is None:
        return data
    tiny = _read_yaml(tiny_file)
    kind = (tiny.get("model") or {}).get("kind")
    wanted = data["model"].get("kind", "embedded")
    if kind is not None and kind != wanted:
        raise ConfigError(
            f"model.path {tiny_file.parent} holds a tiny '{kind}' model but model.kind is '{wanted}'; "
            "use the preset of that model"
        )
    data = apply_overrides(_deep_merge(data, tiny), overrides)
    print(f"solrl: tiny model at {tiny_file.parent}: applied its CPU run overrides ({tiny_file.name}); "
          "--set still wins", file=sys.stderr)
    return data


def load_config(config: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML file or a packaged config by name (`solrl_core.packaged_configs.resolve_config`), merge
    `extends`, apply `--set` overrides (and a tiny model's run overrides), validate."""
    path = resolve_config(config)
    return _validated(_read_yaml(path), overrides, str(path), default_name=path.stem)


def load_config_text(text: str, overrides: list[str] | None = None, source: str = "config text") -> RunConfig:
    """A config given as YAML text, e.g. as resolved by `dump_config` (no `extends`: there is no file to resolve
    its paths against); then as `load_config`."""
    data = _parse_mapping(text, source, f"{source} is empty")
    if "extends" in data:
        raise ConfigError(f"{source}: 'extends' needs a file to resolve it against; give the config as resolved "
                          "(solrl config --show CONFIG)")
    return _validated(data, overrides, source)


def load_config_from(source: str, overrides: list[str] | None = None) -> RunConfig:
    """`source` is YAML text when it spans lines (what a training deployment carries), else a file or a packaged
    config name."""
    if "\n" in source:
        return load_config_text(source, overrides)
    return load_config(source, overrides)


def _validated(data: dict, overrides: list[str] | None, source: str, default_name: str | None = None) -> RunConfig:
    data = apply_overrides(data, overrides or [])
    data = apply_tiny_overrides(data, overrides or [])
    if default_name is not None:
        data.setdefault("name", default_name)
    return validate_config(data, source=source)


def dump_config(cfg: RunConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
