"""The LoRA policy's state: θ and θ_old attached to W0, their adapter files, and the initial checkpoint."""

from __future__ import annotations

from pathlib import Path

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
    init = ctx.run.init_dir
    if (init / STATE_FILE).is_file():
        return init
    backbone = load_backbone(ctx.cfg)
    policy = attach_policy(ctx.cfg, backbone)
    tmp = init.with_name("init.partial")
    tmp.mkdir(parents=True, exist_ok=True)
    save_adapters(policy, tmp)
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
