"""Lab: a step-distilled sibling of the embedded model (`solrl distill-sibling`), to explore with (`explore.sibling`).

What FLUX.1-schnell is to FLUX.1-dev, or SD3.5-Large-Turbo to SD3.5-Large, this is to the embedded model: the same
architecture, tokenizer, text encoder and latent space, weights trained to sample in a few steps. It exists so that
an explore policy "another model" can be calibrated and trained on this machine (`solrl calibrate-explore
--sibling DIR`), as a user would calibrate schnell for dev.

Method: one round of reflow (Liu et al. 2022, "Flow Straight and Fast"). The teacher (the shipped weights) samples
pairs (noise ε, its `teacher_steps`-step ODE sample x̂0) of the training prompts; the student, initialised from the
teacher, learns the straight velocity ε − x̂0 at x_t = (1 − t) x̂0 + t ε, t uniform. Straighter paths are what a
few-step Euler sampler integrates well; the pairing keeps each seed's sample close to the teacher's, which is what
ranking seeds needs. The text encoder is the teacher's, frozen and saved with the student (the conditioning the
explore copy receives is the trained model's own).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from solrl_core.errors import SolrlError
from solrl_core.lab.embedded_pretrain import ema_update

DEFAULT_RECIPE = {
    "teacher_steps": 10,  # the embedded configs' regenerate.steps: the sampler the explore must rank like
    "seeds_per_prompt": 48,  # pairs per training prompt
    "steps": 2000,  # optimizer steps
    "batch_size": 64,
    "lr": 1e-4,
    "seed": 0,
}
PAIR_SEED_BASE = 30_000_000  # the pairs' noise: far from every run's training, evaluation and calibration seeds
EVAL_SEED_BASE = 31_000_000
EVAL_STEPS = (1, 2, 4)


@torch.no_grad()
def teacher_pairs(backbone, prompts: list[str], seeds_per_prompt: int, steps: int, batch: int = 256,
                  progress: bool = True) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """(noise ε, the teacher's `steps`-step ODE sample x̂0, each row's prompt index) for every prompt × seed."""
    from solrl_core.models.sampler import resolve_sampler, sample

    index = np.repeat(np.arange(len(prompts)), seeds_per_prompt)
    seeds = PAIR_SEED_BASE + np.arange(len(index))
    solver = resolve_sampler(None, backbone)
    noise, x0 = [], []
    for start in tqdm(range(0, len(index), batch), desc="teacher pairs", disable=not progress):
        rows = slice(start, start + batch)
        eps = backbone.initial_noise(seeds[rows].tolist())
        cond = backbone.encode_prompts([prompts[i] for i in index[rows]])
        noise.append(eps)
        x0.append(sample(backbone, backbone.transformer, cond, eps, steps, sampler=solver).x0)
    return torch.cat(noise), torch.cat(x0), index


def reflow(backbone, noise: torch.Tensor, x0: torch.Tensor, index: np.ndarray, cond: dict, steps: int,
           batch_size: int, lr: float, seed: int, progress: bool = True) -> tuple[torch.nn.Module, list]:
    """The student (a copy of the teacher's transformer) trained on the pairs; returns (its EMA, the loss curve)."""
    from solrl_core.models.embedded.model import predict_velocity

    student = copy.deepcopy(backbone.transformer).float().train().requires_grad_(True)
    ema = copy.deepcopy(student).eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(student.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    losses, curve = [], []
    bar = tqdm(range(steps), desc="reflow", disable=not progress)
    for step in bar:
        rows = torch.randint(len(index), (batch_size,), generator=gen)
        t = torch.rand(batch_size, generator=gen)[:, None, None, None]
        eps, clean = noise[rows], x0[rows]
        x_t = (1 - t) * clean + t * eps
        prompt_rows = torch.from_numpy(index)[rows]
        batch_cond = {k: v[prompt_rows] for k, v in cond.items()}
        loss = torch.nn.functional.mse_loss(predict_velocity(student, x_t, t.flatten(), batch_cond), eps - clean)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
        optimizer.step()
        ema_update(ema, student, step)
        losses.append(loss.item())
        if (step + 1) % 100 == 0 or step + 1 == steps:
            curve.append([step + 1, round(float(np.mean(losses[-100:])), 5)])
            bar.set_postfix(loss=f"{curve[-1][1]:.4f}")
    return ema, curve


@torch.no_grad()
def compare_with_teacher(backbone, student: torch.nn.Module, prompts: list[str], seeds_per_prompt: int,
                         teacher_steps: int) -> dict:
    """Mean reward and within-prompt Spearman against the teacher at `teacher_steps` of the student at 1, 2, 4
    steps and of the teacher itself at those steps, on fresh seeds of `prompts`."""
    from solrl_core.models.sampler import resolve_sampler, sample
    from solrl_core.rewards.embedded import prompt_match_reward
    from solrl_core.rl.fidelity import ranking_fidelity

    index = np.repeat(np.arange(len(prompts)), seeds_per_prompt)
    seeds = (EVAL_SEED_BASE + np.arange(len(index))).tolist()
    texts = [prompts[i] for i in index]
    cond = backbone.encode_prompts(texts)
    noise = backbone.initial_noise(seeds)
    solver = resolve_sampler(None, backbone)

    def rewards(transformer, steps):
        x0 = sample(backbone, transformer, cond, noise, steps, sampler=solver).x0
        return prompt_match_reward(backbone.decode(x0), texts)["reward"]

    reference = rewards(backbone.transformer, teacher_steps)
    out = {f"teacher@{teacher_steps}": {"mean_reward": round(float(reference.mean()), 4)}}
    for name, transformer in (("student", student), ("teacher", backbone.transformer)):
        for steps in EVAL_STEPS:
            r = rewards(transformer, steps)
            fid = ranking_fidelity(r, reference, index)
            out[f"{name}@{steps}"] = {"mean_reward": round(float(r.mean()), 4),
                                      "spearman_within_prompt": round(float(fid["spearman_within_prompt"]), 4)}
    return out


def distill_sibling(out_dir: str | Path, recipe: dict | None = None, progress: bool = True, threads: int = 2) -> dict:
    """Distil the shipped embedded model into a few-step sibling saved in `out_dir` (an embedded model directory:
    the student's transformer, the teacher's text encoder and tokenizer); returns the summary also stored there."""
    from solrl_core.models.backbones.embedded import EmbeddedBackbone
    from solrl_core.worlds import shapes
    from solrl_core.models.embedded.model import EmbeddedModel

    recipe = {**DEFAULT_RECIPE, **(recipe or {})}
    if recipe["steps"] < 1 or recipe["batch_size"] < 1 or recipe["seeds_per_prompt"] < 1 or recipe["lr"] <= 0:
        raise SolrlError(f"distill-sibling needs steps, batch size and seeds per prompt >= 1 and lr > 0 (got {recipe})")
    torch.set_num_threads(threads)
    backbone = EmbeddedBackbone.from_pretrained()
    began = time.perf_counter()
    prompts = shapes.train_prompts()
    noise, x0, index = teacher_pairs(backbone, prompts, recipe["seeds_per_prompt"], recipe["teacher_steps"],
                                     progress=progress)
    pair_seconds = time.perf_counter() - began
    cond = backbone.encode_prompts(prompts)
    student, curve = reflow(backbone, noise, x0, index, cond, recipe["steps"], recipe["batch_size"], recipe["lr"],
                            recipe["seed"], progress)
    seconds = time.perf_counter() - began
    summary = {"recipe": recipe, "teacher": "the shipped embedded model", "method": "reflow (one round)",
               "pairs": int(len(index)), "pair_seconds": round(pair_seconds, 1), "seconds": round(seconds, 1),
               "threads": threads, "loss_curve": curve,
               "held_out_seeds": compare_with_teacher(backbone, student, prompts[:16], 24, recipe["teacher_steps"])}
    model = backbone.model
    EmbeddedModel(student, model.text_encoder, model.tokenizer, model.resolution).save(
        out_dir, metadata={"sibling": summary})
    return summary
