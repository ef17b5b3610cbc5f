"""The policy's state: θ and θ_old attached to W0 (LoRA adapters, or under `train.adapter: full` whole copies,
solrl_core/rl/full_policy.py), their files, and the initial checkpoint.

A LoRA checkpoint holds adapters.safetensors (θ as `default.*`, θ_old as `old.*`), ema.safetensors and
optimizer.safetensors. A full fine-tuning checkpoint holds the folder `policy/` (torch.distributed.checkpoint in
safetensors files and a JSON index: θ, θ_old, the EMA and AdamW's moments by parameter name); its initial checkpoint
holds none (θ = θ_old = W0)."""

from __future__ import annotations

from pathlib import Path

import torch

from solrl_core.models.backbones.base import Backbone
from solrl_core.models.backbones.cache import load_backbone
from solrl_core.config.schema import RunConfig
from solrl_core.errors import SolrlError
from solrl_core.run.integrity import FILES_KEY, inventory
from solrl_core.run.rundir import write_json_atomic
from solrl_core.seeds import derived_generator
from solrl_core.stages.context import StageContext
from solrl_core.stages.draws import PURPOSE_LORA_INIT
from solrl_core.stages.transformer_copies import weight_sharing_transformer
from solrl_core.run.storage import load_tensors, remove_tree, replace_dir, save_tensors

ADAPTERS_FILE, EMA_FILE, OPTIMIZER_FILE, STATE_FILE = (
    "adapters.safetensors",
    "ema.safetensors",
    "optimizer.safetensors",
    "state.json",
)
POLICY_DIR = "policy"  # full fine-tuning's state (torch.distributed.checkpoint)


def is_full(cfg: RunConfig) -> bool:
    """`train.adapter: full`: every weight of the transformer trained, not LoRA adapters."""
    return cfg.train.adapter == "full"


def attach_policy(cfg: RunConfig, backbone: Backbone, ranks: int = 1):
    """θ and θ_old (LoRA, deterministic init from the run seed) on the base weights W0, shared with the cached
    backbone rather than copied: a training process holds the transformer's weights once. Under full fine-tuning
    θ and θ_old are copies of W0 (`FullPolicy`), sharded over the default process group's `ranks` when more than
    one."""
    from solrl_core.rl.policy import LoraPolicy

    if is_full(cfg):
        from solrl_core.rl.full_policy import FullPolicy

        mesh = None
        if ranks > 1:
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(torch.device(cfg.model.device).type, (ranks,))
        if cfg.train.experts and set(cfg.train.experts) != set(getattr(backbone.transformer, "expert_names", ())):
            raise SolrlError(f"train.experts {cfg.train.experts}: train.adapter: full trains every weight of every "
                             "expert; set train.experts: null")
        return FullPolicy.build(weight_sharing_transformer(backbone), mesh)

    return LoraPolicy.attach(
        weight_sharing_transformer(backbone),
        targets=lora_target_modules(cfg, backbone),
        rank=cfg.train.lora_rank,
        alpha=cfg.train.lora_alpha,
        init="gaussian",
        seed=int(derived_generator(cfg.seed, PURPOSE_LORA_INIT).initial_seed() % (2**31)),
    )


def lora_target_modules(cfg: RunConfig, backbone: Backbone) -> list[str]:
    """peft's target_modules of the run's LoRA: `train.lora_targets` (null: the backbone's), within the trained
    experts of a model of several (`train.experts`, null: the backbone's `trained_experts`;
    solrl_core/models/experts.py)."""
    from solrl_core.models.experts import expert_lora_targets

    targets = cfg.train.lora_targets or backbone.defaults.lora_targets
    try:
        return expert_lora_targets(backbone.transformer, targets, cfg.train.experts or backbone.trained_experts)
    except ValueError as exc:
        raise SolrlError(str(exc)) from None


def save_adapters(policy, directory: Path) -> None:
    tensors = {f"default.{k}": v for k, v in policy.adapter_state_dict("default").items()}
    tensors.update({f"old.{k}": v for k, v in policy.adapter_state_dict("old").items()})
    save_tensors(tensors, directory / ADAPTERS_FILE)


def load_adapters(policy, directory: Path) -> None:
    """The LoRA adapters θ and θ_old of the checkpoint `directory` into `policy` (a full policy's weights:
    `load_training_state`, `full_weights`)."""
    path = directory / ADAPTERS_FILE
    if not path.is_file():
        raise SolrlError(f"adapter checkpoint missing: {path}")
    tensors = load_tensors(path)
    for name in ("default", "old"):
        prefix = f"{name}."
        policy.load_adapter_state_dict(name, {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)})


def ensure_initial_checkpoint(ctx: StageContext) -> Path:
    """Write the initial adapters (θ = θ_old, deterministic from the run seed) if absent; return the directory.
    Under full fine-tuning θ = θ_old = W0: no weights to write."""
    init = ctx.run.init_dir
    if (init / STATE_FILE).is_file():
        return init
    tmp = init.with_name("init.partial")
    tmp.mkdir(parents=True, exist_ok=True)
    if not is_full(ctx.cfg):
        save_adapters(attach_policy(ctx.cfg, load_backbone(ctx.cfg)), tmp)
    # state.json, written last, lists the adapters' files for the consumers to check (solrl_core/run/integrity.py)
    write_json_atomic(tmp / STATE_FILE, {"step": 0, "iteration": -1, FILES_KEY: inventory(tmp)})
    remove_tree(init)
    replace_dir(tmp, init)  # on object stores too, state.json (what marks it complete) lands last
    return init


def initial_work(ctx: StageContext):
    """Writing the initial adapters as model work of one piece (they need the model's layers): run where the models
    are, on a device worker when the stages split (solrl_core/stages/shards.py)."""
    from solrl_core.stages.shards import OnePiece

    return OnePiece(lambda placed: str(ensure_initial_checkpoint(placed)), desc="initial adapters")


def initial_checkpoint(ctx: StageContext) -> Path:
    """The initial adapters' directory, written first (where the models are) when absent: for a process that
    orchestrates stages and must not load the model itself."""
    if not (ctx.run.init_dir / STATE_FILE).is_file():
        from solrl_core.stages.shards import split_or_whole

        split_or_whole(ctx, initial_work)
    return ctx.run.init_dir


def previous_checkpoint(ctx: StageContext) -> Path:
    if ctx.iteration == 0:
        return ensure_initial_checkpoint(ctx)
    return ctx.run.checkpoint_dir(ctx.iteration - 1)


def is_full_policy(policy) -> bool:
    from solrl_core.rl.full_policy import FullPolicy

    return isinstance(policy, FullPolicy)


def save_training_state(policy, ema, optimizer, directory: Path) -> dict:
    """θ, θ_old, the EMA and AdamW's state into the checkpoint `directory`; returns what state.json records of
    them."""
    from solrl_core.rl.optim_state import optimizer_to_tensors

    if is_full_policy(policy):
        policy.save_state(directory / POLICY_DIR, ema, optimizer)
        return {"adapter": "full"}
    opt_tensors, opt_meta = optimizer_to_tensors(optimizer)
    save_adapters(policy, directory)
    save_tensors(ema.state_dict(), directory / EMA_FILE)
    save_tensors(opt_tensors, directory / OPTIMIZER_FILE)
    return {"optimizer": opt_meta}


def load_training_state(policy, ema, optimizer, directory: Path) -> int:
    """What `save_training_state` wrote (θ, θ_old, and the EMA and AdamW's state where the checkpoint has them) into
    `policy`, `ema` and `optimizer`; returns the checkpoint's optimizer step."""
    import json

    from solrl_core.rl.optim_state import optimizer_from_tensors

    state = json.loads((directory / STATE_FILE).read_text())
    if is_full_policy(policy):
        if (directory / POLICY_DIR).is_dir():
            policy.load_state(directory / POLICY_DIR, ema, optimizer)
        return int(state["step"])
    load_adapters(policy, directory)
    if (directory / OPTIMIZER_FILE).is_file():
        optimizer_from_tensors(optimizer, load_tensors(directory / OPTIMIZER_FILE), state["optimizer"])
    if (directory / EMA_FILE).is_file():
        ema.load_state_dict(load_tensors(directory / EMA_FILE))
    return int(state["step"])


def full_weights(backbone: Backbone, directory: Path, key: str) -> dict[str, torch.Tensor]:
    """Under full fine-tuning: parameter name → tensor (in W0's dtype, on W0's device) of θ ("default"), θ_old
    ("old") or the EMA ("ema") in the checkpoint `directory`, for `merged_transformer`; {} for the initial
    checkpoint (W0 itself). Read without a process group, whatever number of ranks wrote it, one transformer block
    at a time: the float32 values of one block are alive at once beside the copy, never the whole model's."""
    from solrl_core.models.blocks import transformer_blocks
    from solrl_core.rl.full_policy import read_state

    if not (directory / POLICY_DIR).is_dir():
        return {}
    base = dict(backbone.transformer.named_parameters())
    groups: dict[str, list[str]] = {}
    blocks = tuple(f"{name}." for name in transformer_blocks(backbone.transformer))
    for name in base:
        groups.setdefault(next((b for b in blocks if name.startswith(b)), ""), []).append(name)
    out = {}
    for names in groups.values():
        state = {key: {name: torch.empty(base[name].shape, dtype=torch.float32) for name in names}}
        read_state(state, directory / POLICY_DIR)
        out.update({name: value.to(device=base[name].device, dtype=base[name].dtype)
                    for name, value in state[key].items()})
    return out


def has_ema(directory: Path) -> bool:
    """Whether the checkpoint `directory` holds an EMA of θ (every checkpoint an update wrote does)."""
    return (directory / EMA_FILE).is_file() or (directory / POLICY_DIR).is_dir()
