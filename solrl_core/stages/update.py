"""update: DiffusionNFT optimizer step(s) on the training samples, then the soft θ_old update and the EMA.

Randomness (which schedule times each sample trains on, and the forward-process noise) is drawn from generators
derived from (run seed, iteration, optimizer step), so a resumed run repeats it exactly without saved RNG state.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time

import numpy as np
import torch
from tqdm.auto import tqdm

from solrl_core.errors import SolrlError
from solrl_core.run.pool import read_table
from solrl_core.rl.advantages import group_advantages, optimality
from solrl_core.rl.distributed import GradientSync, process_group
from solrl_core.rl.nft_loss import forward_noise, nft_loss
from solrl_core.rl.optim_state import optimizer_from_tensors, optimizer_to_tensors
from solrl_core.rl.policy import EmaWeights, old_policy_eta
from solrl_core.run.rundir import write_json_atomic
from solrl_core.models.seeds import derived_generator, randn_rows
from solrl_core.run.storage import load_tensors, save_tensors
from solrl_core.models.backbones.base import module_device
from solrl_core.models.backbones.cache import load_backbone
from solrl_core.stages.checkpoints import (
    EMA_FILE,
    OPTIMIZER_FILE,
    STATE_FILE,
    attach_policy,
    load_adapters,
    previous_checkpoint,
    save_adapters,
)
from solrl_core.stages.context import StageContext
from solrl_core.stages.draws import PURPOSE_TRAIN_NOISE, PURPOSE_TRAIN_T
from solrl_core.stages.shards import process_record, records, run_ranks
from solrl_core.stages.update_launch import launch_update


def training_pairs(n_samples: int, n_times: int, fraction: float, generator: torch.Generator) -> torch.Tensor:
    """(sample, time-index) pairs: each sample trains on its own random subset of the schedule's times."""
    per_sample = max(1, math.ceil(fraction * n_times - 1e-9))
    rows = [
        torch.stack([torch.full((per_sample,), i), torch.randperm(n_times, generator=generator)[:per_sample]], 1)
        for i in range(n_samples)
    ]
    return torch.cat(rows)


def read_back(values: dict[str, torch.Tensor]) -> dict[str, float]:
    """0-dim device tensors as Python floats, in one transfer (one host sync instead of one per value)."""
    keys = list(values)
    if not keys:
        return {}
    return dict(zip(keys, torch.stack([values[k] for k in keys]).tolist()))


def _load_optimizer_state(optimizer, ema: EmaWeights, ckpt) -> int:
    state = json.loads((ckpt / STATE_FILE).read_text())
    if (ckpt / OPTIMIZER_FILE).is_file():
        optimizer_from_tensors(optimizer, load_tensors(ckpt / OPTIMIZER_FILE), state["optimizer"])
    if (ckpt / EMA_FILE).is_file():
        ema.load_state_dict(load_tensors(ckpt / EMA_FILE))
    return int(state["step"])


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
        return launch_update(ctx)  # torchrun: `train.processes` ranks per node each run `update_on_rank`
    start = time.perf_counter()
    summary = update_on_rank(ctx, GradientSync())
    return {**summary, "shards": [process_record(0, ctx.cfg.model.device, start)]}


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
    policy = attach_policy(cfg, backbone)
    if cfg.model.gradient_checkpointing:
        enable_gradient_checkpointing(policy.transformer)
    guidance = train_guidance(cfg, backbone)
    ckpt = previous_checkpoint(ctx)
    load_adapters(policy, ckpt)
    params = policy.trainable_parameters()
    opt = tc.optimizer
    optimizer = torch.optim.AdamW(params, lr=opt.lr, betas=opt.betas, weight_decay=opt.weight_decay, eps=opt.eps)
    ema = EmaWeights(policy, max_decay=tc.ema_max_decay)
    grad_clip = opt.grad_clip or backbone.defaults.grad_clip
    step = _load_optimizer_state(optimizer, ema, ckpt)

    device = module_device(policy.transformer)  # every tensor of the loop lives there (moved once per step)
    samples, attrs = read_table(ctx.artifact("regenerate", "samples.zarr"), ["latent", "prompt_index"])
    reward = read_table(ctx.artifact("score_final", "rewards.zarr"), ["reward"])[0]["reward"]
    x0_all = torch.from_numpy(samples["latent"]).float().to(device)
    prompt_index = samples["prompt_index"]
    adv = group_advantages(reward, prompt_index, clip=tc.adv_clip)
    r_all = torch.as_tensor(optimality(adv, clip=tc.adv_clip), dtype=torch.float32).to(device)
    times = torch.tensor(attrs["sigmas"][:-1], dtype=torch.float32).to(device)  # the schedule's times, terminal 0 excluded
    # the conditioning of the pool's prompts from the run's text cache, once; each row takes its prompt's
    cond_all = ctx.encode(list(attrs["prompts"]))
    row_prompt = torch.as_tensor(prompt_index, dtype=torch.long).to(device)

    history = []
    bar = None  # one bar for all optimizer steps (their micro-batches), made once the count is known
    for inner in range(tc.optimizer_steps):
        gen_t = derived_generator(cfg.seed, ctx.iteration, PURPOSE_TRAIN_T, inner)
        gen_eps = derived_generator(cfg.seed, ctx.iteration, PURPOSE_TRAIN_NOISE, inner)
        pairs = training_pairs(len(x0_all), len(times), tc.timestep_fraction, gen_t)
        n_pairs = len(pairs)
        start, stop = sync.shard_range(n_pairs)  # this rank's pairs (all of them in one process)
        pairs = pairs[start:stop].to(device)
        # rows [start, stop) of randn((n_pairs, *latent), generator=gen_eps), drawing only those rows
        eps_all = randn_rows(gen_eps, n_pairs, x0_all.shape[1:], start, stop).to(device)
        optimizer.zero_grad(set_to_none=True)
        totals: dict[str, torch.Tensor] = {}  # weighted loss terms, summed on the device in float64
        chunks = range(0, len(pairs), tc.micro_batch)
        if bar is None:
            bar = tqdm(total=tc.optimizer_steps * len(chunks), desc=f"update it{ctx.iteration}", unit="batch",
                       leave=False, disable=not ctx.progress)
        for start in chunks:
            idx, tix = pairs[start : start + tc.micro_batch].unbind(1)
            x0, t = x0_all[idx], times[tix]
            x_t = forward_noise(x0, t, eps_all[start : start + tc.micro_batch])
            cond = {key: value[row_prompt[idx]] for key, value in cond_all.items()}
            with torch.no_grad():
                with policy.adapter("old"):
                    v_old = backbone.velocity(policy.transformer, x_t, t, cond, guidance)
                with policy.reference():
                    v_ref = backbone.velocity(policy.transformer, x_t, t, cond, guidance)
            with policy.adapter("default"):
                v = backbone.velocity(policy.transformer, x_t, t, cond, guidance)
            loss, terms = nft_loss(
                v, v_old, v_ref, x_t, x0, t, r_all[idx], beta=tc.beta, adv_clip=tc.adv_clip, kl_weight=tc.kl_weight
            )
            weight = len(idx) / n_pairs
            (loss * weight).backward()
            for key, value in terms.items():
                totals[key] = totals.get(key, 0.0) + value.double() * weight
            bar.update(1)
        sync.all_reduce_gradients(params)
        totals = sync.all_reduce_totals(read_back(totals))  # the step's one read of the loss terms
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, grad_clip))
        if not math.isfinite(grad_norm):
            raise FloatingPointError(f"update it{ctx.iteration}: non-finite gradient norm; nothing was saved")
        optimizer.step()
        step += 1
        eta = old_policy_eta(step, rate=tc.old_eta_rate, max_eta=tc.old_eta_max)
        policy.soft_update_old(eta)
        ema.update(policy, step)
        history.append({**totals, "grad_norm": grad_norm, "old_eta": eta, "pairs": int(n_pairs)})
    bar.close()

    if sync.is_writer:
        _save_checkpoint(ctx, policy, ema, optimizer, step, history)
    last = history[-1]
    return {
        "step": step,
        "loss": last["loss"],
        "policy_loss": last["policy_loss"],
        "kl": last["kl"],
        "grad_norm": last["grad_norm"],
        "old_eta": last["old_eta"],
        "grad_clip": grad_clip,
        "advantage_abs_mean": float(np.abs(adv).mean()),
    }


def _save_checkpoint(ctx: StageContext, policy, ema: EmaWeights, optimizer, step: int, history: list[dict]) -> None:
    opt_tensors, opt_meta = optimizer_to_tensors(optimizer)
    with ctx.run.stage_output(ctx.iteration, "update") as out:
        ckpt_out = out / "checkpoint"
        ckpt_out.mkdir()
        save_adapters(policy, ckpt_out)
        save_tensors(ema.state_dict(), ckpt_out / EMA_FILE)
        save_tensors(opt_tensors, ckpt_out / OPTIMIZER_FILE)
        write_json_atomic(
            ckpt_out / STATE_FILE,
            {"step": step, "iteration": ctx.iteration, "optimizer": opt_meta, "rng": "derived from (seed, iteration)"},
        )
        write_json_atomic(out / "metrics.json", {"steps": history})
