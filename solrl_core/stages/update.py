"""update: the run's objective (`objective.name`: DiffusionNFT, Flow-GRPO, a plug-in) trained for
`train.optimizer_steps` optimizer steps on the regenerated samples, then θ_old follows θ as the objective says and
the EMA moves.

This stage owns what is common to every objective (solrl_core/rl/objective_base.py): the model and its adapters,
the data on the device, the sharding of each step's training pairs over ranks, gradient sync, clipping, AdamW and
the checkpoint. Randomness (the pairs' times and noise) is drawn from generators derived from (run seed, iteration,
optimizer step), so a resumed run repeats it exactly without saved RNG state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time

import torch
from tqdm.auto import tqdm

from solrl_core.edit_sources import Sources, pool_sources
from solrl_core.errors import SolrlError
from solrl_core.run.pool import column_names, read_table
from solrl_core.rl.distributed import GradientSync, process_group
from solrl_core.rl.objective_base import TrainingData
from solrl_core.rl.objectives import objective_for
from solrl_core.rl.policy import EmaWeights, LoraPolicy
from solrl_core.run.rundir import write_json_atomic
from solrl_core.seeds import derived_generator
from solrl_core.models.backbones.base import module_device
from solrl_core.models.backbones.cache import drop_models, load_backbone
from solrl_core.placement import resolve_devices
from solrl_core.stages.checkpoints import (
    STATE_FILE,
    attach_policy,
    is_full_policy,
    load_training_state,
    previous_checkpoint,
    save_training_state,
)
from solrl_core.stages.context import StageContext
from solrl_core.stages.draws import PURPOSE_TRAIN_NOISE, PURPOSE_TRAIN_T
from solrl_core.stages.shards import on_the_one_device, process_record, records, run_ranks
from solrl_core.stages.update_launch import launch_update


def read_back(values: dict[str, torch.Tensor]) -> dict[str, float]:
    """0-dim device tensors as Python floats, in one transfer (one host sync instead of one per value)."""
    keys = list(values)
    if not keys:
        return {}
    return dict(zip(keys, torch.stack([values[k] for k in keys]).tolist()))


def enable_gradient_checkpointing(transformer: torch.nn.Module) -> None:
    """model.gradient_checkpointing: diffusers' activation recomputation in the transformer's blocks (grad-enabled
    forwards only, so the no-grad v_old / v_ref forwards are unchanged)."""
    if not getattr(transformer, "_supports_gradient_checkpointing", False):
        raise SolrlError(f"model.gradient_checkpointing: {type(transformer).__name__} does not support gradient "
                         "checkpointing; set it to false")
    transformer.enable_gradient_checkpointing()


def train_guidance(cfg, backbone) -> float:
    """guidance.train: an input of distilled-guidance backbones (FLUX.1-dev); the update never runs CFG."""
    scale = cfg.guidance.train
    if scale != 1.0 and not backbone.defaults.distilled_guidance:
        raise SolrlError(f"guidance.train = {scale} needs a backbone with distilled guidance (FLUX.1-dev); set it "
                         "to 1.0")
    return scale


def training_data(ctx: StageContext, trajectory: bool, device: torch.device
                  ) -> tuple[TrainingData, list[str], list[Sources] | None]:
    """The regenerate stage's samples and score_final's rewards on `device` (with the SDE trajectories and their
    log-probabilities when the objective trains on them), the pool's prompts and their source images (edit prompts;
    None otherwise)."""
    names = ["latent", "prompt_index"] + (["trajectory", "log_prob"] if trajectory else [])
    path = ctx.artifact("regenerate", "samples.zarr")
    present = column_names(path)
    missing = [name for name in names if name not in present]
    if missing:
        raise SolrlError(f"update of iteration {ctx.iteration}: the regenerated samples have no {missing[0]} column, "
                         f"which objective '{ctx.cfg.objective.name}' trains on (were they sampled under another "
                         "objective?); run the iteration again from explore")
    samples, attrs = read_table(path, names)
    reward = read_table(ctx.artifact("score_final", "rewards.zarr"), ["reward"])[0]["reward"]

    def on_device(name: str) -> torch.Tensor | None:
        return torch.from_numpy(samples[name]).float().to(device) if name in samples else None

    window = tuple(attrs["sde_window"]) if trajectory else None
    data = TrainingData(latents=on_device("latent"), sigmas=list(attrs["sigmas"]), rewards=reward,
                        prompt_index=samples["prompt_index"], trajectory=on_device("trajectory"),
                        log_probs=on_device("log_prob"), window=window)
    return data, list(attrs["prompts"]), pool_sources(attrs)


def velocity_under(policy: LoraPolicy, backbone, cond_all: dict, row_prompt: torch.Tensor, guidance: float):
    """The objectives' `forward(adapter, x, t, rows)`: the velocity under θ ("default"), θ_old ("old") or the base W0
    ("reference"), on the conditioning of sample rows `rows`."""

    def forward(adapter: str, x_t: torch.Tensor, t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        cond = {key: value[row_prompt[rows]] for key, value in cond_all.items()}
        with policy.reference() if adapter == "reference" else policy.adapter(adapter) as module:
            return backbone.velocity(module, x_t, t, cond, guidance)

    return forward


def run_update(ctx: StageContext) -> dict:
    """The update where the run's models are: on its device workers (`train.processes` ranks, each on a worker that
    keeps its model between iterations), in this process on one device, or by torchrun (`launch_update`) when the
    ranks span machines (`train.nodes` > 1) or this process has no device workers of its own."""
    tc = ctx.cfg.train
    ranks = (run_ranks(ctx, update_rank, tc.processes, f"update it{ctx.iteration}")
             if tc.nodes == 1 else None)
    if ranks is not None:
        return {**ranks[0]["result"], "shards": records(ranks)}
    if tc.processes > 1 or tc.nodes > 1:
        drop_models()  # torchrun's rank 0 loads on this process's GPU: never beside a copy held here
        return launch_update(ctx)  # torchrun: `train.processes` ranks per node each run `update_on_rank`
    start = time.perf_counter()
    summary = update_on_rank(on_the_one_device(ctx), GradientSync())  # placed as the other stages: one model
    return {**summary, "shards": [process_record(0, resolve_devices(ctx.cfg)[0], start)]}


def update_rank(ctx: StageContext, rank: int, world: int, store: str) -> dict:
    """Rank `rank` of `world` device workers running the update together (`run_ranks`): they meet in a process
    group through the file `store`, and every rank returns the same summary."""
    if world == 1:
        return update_on_rank(ctx, GradientSync())
    with process_group(ctx.cfg.train.dist_backend, store, ctx.cfg.model.device, rank=rank, world=world) as sync:
        return update_on_rank(dataclasses.replace(ctx, progress=ctx.progress and rank == 0), sync)


def update_on_rank(ctx: StageContext, sync: GradientSync) -> dict:
    """The update on one rank: its shard of the (sample, time) pairs, gradients summed over ranks by `sync`,
    identical optimizer steps everywhere; the writer rank saves the checkpoint. One process = one rank of one."""
    cfg, tc = ctx.cfg, ctx.cfg.train
    backbone = load_backbone(cfg)
    policy = attach_policy(cfg, backbone, sync.world_size)
    if cfg.model.gradient_checkpointing:
        enable_gradient_checkpointing(policy.transformer)
    guidance = train_guidance(cfg, backbone)
    ckpt = previous_checkpoint(ctx)
    params = policy.trainable_parameters()
    opt = tc.optimizer
    optimizer = torch.optim.AdamW(params, lr=opt.lr, betas=opt.betas, weight_decay=opt.weight_decay, eps=opt.eps)
    ema = EmaWeights(policy, max_decay=tc.ema_max_decay)
    grad_clip = opt.grad_clip or backbone.defaults.grad_clip
    step = load_training_state(policy, ema, optimizer, ckpt)

    device = module_device(policy.transformer)  # every tensor of the loop lives there (moved once per step)
    objective = objective_for(cfg)
    data, prompts, sources = training_data(ctx, objective.trajectory, device)
    prepared = objective.prepare(data)
    # the conditioning of the pool's prompts from the run's text cache, once; each row takes its prompt's
    cond_all = ctx.encode(prompts, sources)
    row_prompt = torch.as_tensor(data.prompt_index, dtype=torch.long).to(device)
    forward = velocity_under(policy, backbone, cond_all, row_prompt, guidance)

    history = []
    bar = None  # one bar for all optimizer steps (their micro-batches), made once the count is known
    for inner in range(tc.optimizer_steps):
        generators = (derived_generator(cfg.seed, ctx.iteration, PURPOSE_TRAIN_T, inner),
                      derived_generator(cfg.seed, ctx.iteration, PURPOSE_TRAIN_NOISE, inner))
        pairs = objective.step(data, prepared, generators, sync.shard_range)  # this rank's share of the pairs
        optimizer.zero_grad(set_to_none=True)
        totals: dict[str, torch.Tensor] = {}  # weighted loss terms, summed on the device in float64
        chunks = list(range(0, len(pairs), tc.micro_batch))
        idle = sharded_micro_batches(policy, sync, len(chunks))  # FSDP: every rank takes as many forwards
        if bar is None:
            bar = tqdm(total=tc.optimizer_steps * len(chunks), desc=f"update it{ctx.iteration}", unit="batch",
                       leave=False, disable=not ctx.progress)
        for start in chunks:
            stop = min(start + tc.micro_batch, len(pairs))
            with calls_at_row_times(backbone, policy, pairs, start, stop):
                loss, terms = pairs.loss(start, stop, forward)
            weight = (stop - start) / pairs.n_pairs
            (loss * weight).backward()
            for key, value in terms.items():
                totals[key] = totals.get(key, 0.0) + value.double() * weight
            bar.update(1)
        for _ in range(idle):  # the last micro-batch again at weight 0: the collectives, not the gradient
            with calls_at_row_times(backbone, policy, pairs, chunks[-1], len(pairs)):
                loss = pairs.loss(chunks[-1], len(pairs), forward)[0]
            (loss * 0.0).backward()
        reduce_gradients(policy, sync, params)
        totals = sync.all_reduce_totals(read_back(totals))  # the step's one read of the loss terms
        grad_norm = whole(torch.nn.utils.clip_grad_norm_(params, grad_clip))
        if not math.isfinite(grad_norm):
            raise FloatingPointError(f"update it{ctx.iteration}: non-finite gradient norm; nothing was saved")
        optimizer.step()
        step += 1
        eta = objective.old_policy_eta(step)
        policy.soft_update_old(eta)
        ema.update(policy, step)
        history.append({**totals, "grad_norm": grad_norm, "old_eta": eta, "pairs": int(pairs.n_pairs)})
    bar.close()

    _save_checkpoint(ctx, policy, ema, optimizer, step, history, sync)
    last = history[-1]
    return {
        "step": step,
        "loss": last["loss"],
        "policy_loss": last["policy_loss"],
        "kl": last["kl"],
        "grad_norm": last["grad_norm"],
        "old_eta": last["old_eta"],
        "grad_clip": grad_clip,
        "objective": objective.name,
        **objective.summary_metrics(prepared),
    }


@contextlib.contextmanager
def calls_at_row_times(backbone, policy, pairs, start: int, stop: int):
    """The context of a micro-batch's model calls: its rows' times as the objective step knows them on the host
    (`row_times`), given to every model the policy's forwards call (the backbone's `calls_at`: a model of experts
    routes its rows by them, with no read back); nothing where the step does not know them."""
    times = pairs.row_times(start, stop)
    with contextlib.ExitStack() as stack:
        if times is not None:
            models = [policy.transformer, *(policy.modules.values() if is_full_policy(policy) else ())]
            for model in models:
                stack.enter_context(backbone.calls_at(model, times))
        yield


def sharded_micro_batches(policy, sync: GradientSync, chunks: int) -> int:
    """How many more micro-batches this rank runs so that every rank of a sharded full policy runs as many (FSDP2's
    all-gathers and reduce-scatters are collectives: ranks whose shares of the pairs differ in micro-batches would
    wait for each other forever); 0 for LoRA and on one process."""
    if not (is_full_policy(policy) and sync.world_size > 1):
        return 0
    return int(sync.all_reduce_max(chunks)) - chunks


def reduce_gradients(policy, sync: GradientSync, params) -> None:
    """θ's gradients summed over the ranks: FSDP2 reduce-scattered a sharded full policy's (their mean, made a sum
    here); LoRA's are all-reduced."""
    if is_full_policy(policy):
        policy.sum_gradients()
    else:
        sync.all_reduce_gradients(params)


def whole(value) -> float:
    """A 0-dim tensor, or a DTensor of the sharded full policy's norm, as a float."""
    return float(value.full_tensor() if hasattr(value, "full_tensor") else value)


def _save_checkpoint(ctx: StageContext, policy, ema: EmaWeights, optimizer, step: int, history: list[dict],
                     sync: GradientSync) -> None:
    """The writer rank writes the checkpoint; under a sharded full policy every rank writes its shards into it (the
    writer makes the folder first)."""
    if not sync.is_writer:
        if is_full_policy(policy) and sync.world_size > 1:
            sync.barrier()  # the writer has made the folder
            save_training_state(policy, ema, optimizer, ctx.run.partial_dir(ctx.iteration, "update") / "checkpoint")
        return
    with ctx.run.stage_output(ctx.iteration, "update") as out:
        ckpt_out = out / "checkpoint"
        ckpt_out.mkdir()
        if is_full_policy(policy) and sync.world_size > 1:
            sync.barrier()
        recorded = save_training_state(policy, ema, optimizer, ckpt_out)
        write_json_atomic(
            ckpt_out / STATE_FILE,
            {"step": step, "iteration": ctx.iteration, **recorded, "rng": "derived from (seed, iteration)"},
        )
        write_json_atomic(out / "metrics.json", {"steps": history})
