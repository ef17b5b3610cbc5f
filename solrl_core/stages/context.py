"""What every stage receives, and the shared loaders (backbone, prompts, policy copies, seeds)."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from solrl_core.backbones.base import Backbone
from solrl_core.config import RunConfig
from solrl_core.errors import SolrlError
from solrl_core.integrity import FILES_KEY, inventory
from solrl_core.prompts import prompt_set, train_prompt_set  # noqa: F401  (re-exported)
from solrl_core.rundir import RunDir
from solrl_core.seeds import derived_generator
from solrl_core.storage import load_tensors, remove_tree, replace_dir, save_tensors

# Purposes for derived random generators: each random choice has its own stream.
PURPOSE_PROMPTS, PURPOSE_SELECT, PURPOSE_TRAIN_T, PURPOSE_TRAIN_NOISE, PURPOSE_LORA_INIT = range(5)


@dataclass
class StageContext:
    run: RunDir
    cfg: RunConfig
    iteration: int
    progress: bool = True

    @property
    def out_stage_dir(self) -> Path:
        return self.run.iteration_dir(self.iteration)

    def artifact(self, stage: str, name: str) -> Path:
        return self.run.stage_dir(self.iteration, stage) / name

    def encode(self, prompts) -> dict[str, torch.Tensor]:
        """Batch-first conditioning of `prompts` from the run's text-embedding cache (solrl_core/text_cache.py)."""
        from solrl_core.text_cache import run_text_cache

        return run_text_cache(self.run, self.cfg, progress=self.progress).get(prompts)


@functools.lru_cache(maxsize=2)
def _load_backbone(model_json: str) -> Backbone:
    from solrl_core.backbones import registry
    from solrl_core.config import ModelConfig

    return registry.load_backbone(ModelConfig.model_validate_json(model_json))


def load_backbone(cfg: RunConfig) -> Backbone:
    """The backbone with its pristine base weights W0 (cached per process; never modify `.transformer`)."""
    return _load_backbone(cfg.model.model_dump_json())


def fresh_transformer(backbone: Backbone) -> torch.nn.Module:
    """A private copy of the base transformer, safe to load other weights into, merge into or quantize."""
    return copy.deepcopy(backbone.transformer).eval()


def weight_sharing_transformer(backbone: Backbone) -> torch.nn.Module:
    """A copy of the base transformer's modules whose parameters and buffers ARE W0's (no weight memory).

    For the LoRA policy: peft wraps the copy's layers (the cached module tree is untouched) and never writes to base
    weights; merged weights are computed out of place (`LoraPolicy.merged_state_dict`). Anything that writes weights
    in place (load_state_dict, quantization, `.to(dtype)`) must use `fresh_transformer` instead."""
    base = backbone.transformer
    shared = {id(t): t for t in (*base.parameters(), *base.buffers())}
    return copy.deepcopy(base, memo=shared).eval()


def iteration_prompts(cfg: RunConfig, iteration: int) -> list[str]:
    """The prompts of one iteration: a seeded draw without replacement (with repeats only if the set is small)."""
    prompts = train_prompt_set(cfg)
    gen = derived_generator(cfg.seed, iteration, PURPOSE_PROMPTS)
    order: list[int] = []
    while len(order) < cfg.prompts.per_iteration:
        order += torch.randperm(len(prompts), generator=gen).tolist()
    return [prompts[i] for i in order[: cfg.prompts.per_iteration]]


def candidate_seed(cfg: RunConfig, iteration: int, prompt_slot: int, candidate: int) -> int:
    """The noise seed of candidate `candidate` of the prompt in slot `prompt_slot`: unique within a run."""
    n = cfg.explore.seeds_per_prompt
    return ((cfg.seed * 100_003 + iteration) * cfg.prompts.per_iteration + prompt_slot) * n + candidate


# ---- policy state -----------------------------------------------------------------------------------------------
ADAPTERS_FILE, EMA_FILE, OPTIMIZER_FILE, STATE_FILE = (
    "adapters.safetensors",
    "ema.safetensors",
    "optimizer.safetensors",
    "state.json",
)


def attach_policy(cfg: RunConfig, backbone: Backbone):
    """θ and θ_old (LoRA, deterministic init from the run seed) on the base weights W0, shared with the cached
    backbone rather than copied: a training process holds the transformer's weights once."""
    from solrl_core.rl.policy import LoraPolicy

    targets = cfg.train.lora_targets or backbone.defaults.lora_targets
    return LoraPolicy.attach(
        weight_sharing_transformer(backbone),
        targets=targets,
        rank=cfg.train.lora_rank,
        alpha=cfg.train.lora_alpha,
        init="gaussian",
        seed=int(derived_generator(cfg.seed, PURPOSE_LORA_INIT).initial_seed() % (2**31)),
    )


def save_adapters(policy, directory: Path) -> None:
    tensors = {f"default.{k}": v for k, v in policy.adapter_state_dict("default").items()}
    tensors.update({f"old.{k}": v for k, v in policy.adapter_state_dict("old").items()})
    save_tensors(tensors, directory / ADAPTERS_FILE)


def load_adapters(policy, directory: Path) -> None:
    path = directory / ADAPTERS_FILE
    if not path.is_file():
        raise SolrlError(f"adapter checkpoint missing: {path}")
    tensors = load_tensors(path)
    for name in ("default", "old"):
        prefix = f"{name}."
        policy.load_adapter_state_dict(name, {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)})


def ensure_initial_checkpoint(ctx: StageContext) -> Path:
    """Write the initial adapters (θ = θ_old, deterministic from the run seed) if absent; return the directory."""
    from solrl_core.rundir import write_json_atomic

    init = ctx.run.init_dir
    if (init / STATE_FILE).is_file():
        return init
    backbone = load_backbone(ctx.cfg)
    policy = attach_policy(ctx.cfg, backbone)
    tmp = init.with_name("init.partial")
    tmp.mkdir(parents=True, exist_ok=True)
    save_adapters(policy, tmp)
    # state.json, written last, lists the adapters' files for the consumers to check (solrl_core/integrity.py)
    write_json_atomic(tmp / STATE_FILE, {"step": 0, "iteration": -1, FILES_KEY: inventory(tmp)})
    remove_tree(init)
    replace_dir(tmp, init)  # on object stores too, state.json (what marks it complete) lands last
    return init


def previous_checkpoint(ctx: StageContext) -> Path:
    if ctx.iteration == 0:
        return ensure_initial_checkpoint(ctx)
    return ctx.run.checkpoint_dir(ctx.iteration - 1)


@dataclass(frozen=True)
class ExploreSetting:
    precision: str  # a concrete backend name (auto resolved)
    steps: int
    reason: str
    escalations: tuple[dict, ...] = ()


def explore_setting(ctx: StageContext) -> ExploreSetting:
    """The explore precision and steps of this iteration: the configured ones, raised by the fidelity guardrail
    when earlier iterations ranked seeds badly. Replayed from the finished iterations' manifests, so a resumed or
    re-run stage always agrees with the first run."""
    import math

    from solrl_core.quant.backends import resolve_backend
    from solrl_core.quant.guardrail import FidelityGuardrail

    ex = ctx.cfg.explore
    choice = resolve_backend(ex.precision, ctx.cfg.model.device)
    if not (ex.guardrail.enabled and ctx.cfg.regenerate.enabled):
        return ExploreSetting(choice.name, ex.steps, choice.reason)
    g = ex.guardrail
    guard = FidelityGuardrail(g.floor, g.patience, [(choice.name, ex.steps), *[tuple(r) for r in g.ladder]])
    escalations = []
    for i in range(ctx.iteration):
        summary = ctx.run.manifest(i, "score_final")["summary"]
        event = guard.observe(i, summary.get("fidelity_spearman", math.nan))
        if event is not None:
            escalations.append(event.to_dict())
    reason = choice.reason if guard.level == 0 else escalations[-1]["reason"]
    return ExploreSetting(guard.precision, guard.steps, reason, tuple(escalations))

