"""Pretraining of the embedded models: rectified flow on freshly rendered scenes of the training prompts, images of
shapes (the image model) or videos of moving shapes (the video model; `World`).

Loss: x_t = (1 - t) x0 + t eps, the transformer predicts v = eps - x0 (mean squared error), t ~ uniform(0, 1).
The text encoder trains jointly. AdamW with warm-up, a constant rate, then a linear decay; the EMA of the weights is
what gets saved.
Held-out prompts (the world's `test_prompts()`) are never trained on. Same seed and thread count -> same weights.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from solrl_core.worlds import shapes
from solrl_core.errors import SolrlError
from solrl_core.models.embedded.model import (
    METADATA_FILE,
    EmbeddedModel,
    build_model,
    images_to_latents,
    load_model,
    predict_velocity,
)

# The run that produced the shipped weights (solrl_core/models/embedded/pretrained/).
DEFAULT_STEPS = 9000
MOTION_STEPS = 4000  # the video model's (solrl_core/models/embedded/pretrained_video/)
EDIT_STEPS = 1500  # the editing model's (solrl_core/models/embedded/pretrained_edit/), from the image model's weights
EDIT_LR = 3e-4  # a fine-tuning's rate (the image model's weights are its start)
SHAPES_WEIGHTS = Path(__file__).resolve().parent.parent / "models" / "embedded" / "pretrained"
DEFAULT_BATCH = 32
DEFAULT_LR = 1e-3
DEFAULT_SEED = 0
WARMUP_STEPS = 100
DECAY_FRACTION = 0.3
EMA_DECAY = 0.999
EVAL_SEEDS_PER_PROMPT = 4


def _lr_factor(step: int, steps: int) -> float:
    """Linear warm-up, constant, then a linear decay to 10% over the last DECAY_FRACTION of the steps."""
    if step < WARMUP_STEPS:
        return (step + 1) / WARMUP_STEPS
    decay_start = steps * (1 - DECAY_FRACTION)
    if step < decay_start:
        return 1.0
    return 1.0 - 0.9 * min((step - decay_start) / max(steps - decay_start, 1), 1.0)


def _sample_t(batch: int, generator: torch.Generator) -> torch.Tensor:
    """Uniform t: the few-step uniform-sigma sampler evaluates the model at t = 1, 0.9, ..., all of which need training
    (a logit-normal t, as in SD3, almost never visits t = 1, where the first and largest Euler step is taken)."""
    return torch.rand(batch, generator=generator)


@torch.no_grad()
def ema_update(ema: torch.nn.Module, model: torch.nn.Module, step: int) -> None:
    """`ema` moved towards `model` with decay min(EMA_DECAY, (1 + step) / (10 + step)) (also the sibling's reflow)."""
    decay = min(EMA_DECAY, (1 + step) / (10 + step))
    for e, p in zip(ema.parameters(), model.parameters()):
        e.lerp_(p, 1 - decay)


@dataclass(frozen=True)
class World:
    """What the pretraining draws and trains on: the image world of shapes or the video world of moving shapes."""

    name: str
    build: Callable[..., EmbeddedModel]  # (resolution, seed) -> a randomly initialised model
    render: Callable[..., np.ndarray]  # (prompts, rng, resolution) -> uint8 samples
    to_latents: Callable[[np.ndarray], torch.Tensor]
    velocity: Callable[..., torch.Tensor]  # (transformer, x_t, sigma, cond)
    train_prompts: Callable[[], list[str]]
    test_prompts: Callable[[], list[str]]
    reward: Callable[..., dict]  # the world's programmatic reward: (samples, prompts[, sources]) -> {"reward": ...}
    backbone: str  # "module:Class" of the adapter that samples the model
    steps: int = DEFAULT_STEPS  # the optimizer steps of its shipped weights
    # an editing world's: (model, rendered (sources, targets), prompts) -> (x0, conditioning); None: the samples'
    # latents and the prompts' encoding
    batch: Callable[..., tuple] | None = None
    lr: float = DEFAULT_LR  # its shipped weights'
    threads: int = 2  # the torch threads its shipped weights were trained with (the same seed and threads: the same
    # weights)

    def training_batch(self, model: EmbeddedModel, rendered, prompts: list[str]) -> tuple[torch.Tensor, dict]:
        """(x0, conditioning with grad) of one rendered batch."""
        if self.batch is None:
            return self.to_latents(rendered), model.encode(prompts)
        return self.batch(model, rendered, prompts)


def world(name: str) -> World:
    """The world called `name`: "shapes" (images, the default model), "motion" (videos) or "edits" (the editing
    model, started from the shipped image model: solrl_core/models/embedded/edit_model.py)."""
    from solrl_core.worlds import edits, motion
    from solrl_core.models.embedded import edit_model
    from solrl_core.models.embedded.video_model import build_video_model, predict_video_velocity, videos_to_latents
    from solrl_core.rewards.embedded import prompt_match_reward
    from solrl_core.rewards.embedded_edit import edit_prompts_reward
    from solrl_core.rewards.embedded_motion import motion_match_reward

    worlds = {
        "shapes": World("shapes", lambda resolution, seed: build_model(resolution, seed=seed),
                        lambda prompts, rng, resolution: shapes.render_batch(prompts, rng, resolution),
                        images_to_latents, predict_velocity, shapes.train_prompts, shapes.test_prompts,
                        prompt_match_reward, "solrl_core.models.backbones.embedded:EmbeddedBackbone"),
        "motion": World("motion", lambda resolution, seed: build_video_model(resolution, seed=seed),
                        lambda prompts, rng, resolution: motion.render_batch(prompts, rng, resolution=resolution),
                        videos_to_latents, predict_video_velocity, motion.train_prompts, motion.test_prompts,
                        motion_match_reward, "solrl_core.models.backbones.embedded_video:EmbeddedVideoBackbone",
                        MOTION_STEPS, threads=1),
        "edits": World("edits", lambda resolution, seed: edit_model.from_image_model(load_model(SHAPES_WEIGHTS)),
                       lambda prompts, rng, resolution: edits.render_pairs(
                           [edits.edit_of_prompt(p) for p in prompts], rng, resolution),
                       images_to_latents, edit_model.predict_edit_velocity,
                       lambda: [e.prompt for e in edits.train_edits()], lambda: [e.prompt for e in edits.test_edits()],
                       edit_prompts_reward, "solrl_core.models.backbones.embedded_edit:EmbeddedEditBackbone",
                       EDIT_STEPS, batch=lambda model, rendered, prompts: (
                           images_to_latents(rendered[1]),
                           edit_model.encode_edits(model, prompts, edit_model.source_latents(rendered[0]))),
                       lr=EDIT_LR),
    }
    if name not in worlds:
        raise SolrlError(f"unknown world '{name}' (known: {', '.join(worlds)})")
    return worlds[name]


def sample_rewards(
    model: EmbeddedModel, prompts: Sequence[str], seeds: Sequence[int], steps: int, batch: int = 128,
    world_name: str = "shapes",
) -> tuple[np.ndarray, np.ndarray]:
    """Euler samples of every (prompt, seed) pair and their world's reward: (samples (P*S, ...), rewards (P, S))."""
    import importlib

    from PIL import Image

    from solrl_core.models.sampler import sample

    w = world(world_name)
    module, _, cls = w.backbone.partition(":")
    backbone = getattr(importlib.import_module(module), cls)(model)
    sources = None
    if w.batch is not None:  # an editing world: each prompt's source, drawn once per prompt
        sources = w.render(list(prompts), np.random.default_rng(0), model.resolution)[0]
    pairs = [(i, s) for i in range(len(prompts)) for s in seeds]
    images = []
    for start in range(0, len(pairs), batch):
        chunk = pairs[start : start + batch]
        texts = [prompts[i] for i, _ in chunk]
        if sources is None:
            cond = backbone.encode_prompts(texts)
        else:
            cond = backbone.encode_prompts(texts, [[Image.fromarray(sources[i])] for i, _ in chunk])
        noise = backbone.initial_noise([s for _, s in chunk])
        x0 = sample(backbone, backbone.transformer, cond, noise, steps, sampler="euler").x0
        images.append(backbone.decode(x0))
    images = np.concatenate(images)
    rows = [prompts[i] for i, _ in pairs]
    if sources is None:
        reward = w.reward(images, rows)["reward"]
    else:
        reward = w.reward(images, rows, sources[[i for i, _ in pairs]])["reward"]
    return images, reward.reshape(len(prompts), len(seeds))


def evaluate(model: EmbeddedModel, seeds_per_prompt: int = EVAL_SEEDS_PER_PROMPT, world_name: str = "shapes") -> dict:
    """Mean reward of samples (train / held-out prompts, 6 and 10 Euler steps) and the mean within-prompt std."""
    w = world(world_name)
    seeds = list(range(10_000, 10_000 + seeds_per_prompt))
    out = {}
    for steps in (6, 10):
        for split, prompts in (("train", w.train_prompts()), ("test", w.test_prompts())):
            _, reward = sample_rewards(model, prompts, seeds, steps, world_name=world_name)
            out[f"reward_{split}_{steps}steps"] = round(float(reward.mean()), 4)
            out[f"within_prompt_std_{split}_{steps}steps"] = round(float(reward.std(axis=1).mean()), 4)
    return out


def pretrain(
    out_dir: str | Path,
    steps: int | None = None,
    batch_size: int | None = DEFAULT_BATCH,
    lr: float | None = None,
    seed: int = DEFAULT_SEED,
    resolution: int = 32,
    progress: bool = True,
    log_every: int = 100,
    save_every: int = 0,
    evaluate_samples: bool = True,
    threads: int | None = None,
    world_name: str = "shapes",
) -> dict:
    """Train the embedded model of `world_name` ("shapes": the image model; "motion": the video model) from scratch
    and save it to `out_dir`; returns the summary also stored there.

    `steps`, `batch_size`, `lr`, `threads` of None mean the defaults (those of the world's shipped weights).
    `save_every` > 0 also saves the EMA weights every that many steps (same directory, overwritten), so a long run
    can be inspected while it trains. Saved weights are fp16 (loaded back as fp32).
    Bit-for-bit reproducibility holds for the same seed and `threads` (float sums are ordered per thread count).
    On a busy machine set OMP_WAIT_POLICY=PASSIVE before starting Python: spinning OpenMP threads otherwise slow
    2-thread torch down several-fold when another process holds a core.
    """
    w = world(world_name)
    steps = w.steps if steps is None else steps
    batch_size = DEFAULT_BATCH if batch_size is None else batch_size
    lr = w.lr if lr is None else lr
    threads = w.threads if threads is None else threads
    if steps < 1 or batch_size < 1 or lr <= 0:
        raise SolrlError(f"pretrain needs steps >= 1, batch size >= 1 and lr > 0 (got {steps}, {batch_size}, {lr})")
    torch.set_num_threads(threads)
    model = w.build(resolution, seed)
    transformer, text_encoder = model.transformer.train(), model.text_encoder.train()
    params = list(transformer.parameters()) + list(text_encoder.parameters())
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.99), weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, steps))
    ema_transformer = copy.deepcopy(transformer).requires_grad_(False)
    ema_text = copy.deepcopy(text_encoder).requires_grad_(False)

    data_rng = np.random.default_rng(seed)
    noise_gen = torch.Generator().manual_seed(seed)
    prompts = w.train_prompts()
    losses, curve = [], []
    start = time.perf_counter()
    bar = tqdm(range(steps), desc="pretrain", disable=not progress)
    for step in bar:
        batch_prompts = [prompts[i] for i in data_rng.integers(0, len(prompts), batch_size)]
        x0, cond = w.training_batch(model, w.render(batch_prompts, data_rng, resolution), batch_prompts)
        eps = torch.randn(x0.shape, generator=noise_gen)
        t = _sample_t(batch_size, noise_gen)
        tb = t.view(-1, *[1] * (x0.ndim - 1))
        x_t = (1 - tb) * x0 + tb * eps
        v = w.velocity(transformer, x_t, t, cond)
        loss = torch.nn.functional.mse_loss(v, eps - x0)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        ema_update(ema_transformer, transformer, step)
        ema_update(ema_text, text_encoder, step)
        losses.append(loss.item())
        if (step + 1) % log_every == 0 or step + 1 == steps:
            recent = float(np.mean(losses[-log_every:]))
            curve.append([step + 1, round(recent, 5)])
            bar.set_postfix(loss=f"{recent:.4f}")
            if not progress:
                print(f"pretrain step {step + 1}/{steps} loss {recent:.4f}", flush=True)
        if save_every and (step + 1) % save_every == 0 and step + 1 < steps:
            partial = EmbeddedModel(ema_transformer, ema_text, model.tokenizer, resolution, dict(model.metadata),
                                    frames=model.frames)
            partial.save(out_dir, metadata={"pretraining": {"steps": step + 1, "of_steps": steps, "partial": True}})
    seconds = time.perf_counter() - start

    trained = EmbeddedModel(ema_transformer.eval(), ema_text.eval(), model.tokenizer, resolution,
                            dict(model.metadata), frames=model.frames)
    summary = {
        "world": world_name,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
        "threads": threads,
        "seconds": round(seconds, 1),
        "final_loss": curve[-1][1] if curve else None,
        "loss_curve": curve,
        "weights": f"EMA {EMA_DECAY}",
    }
    out = trained.save(out_dir, metadata={"pretraining": summary})
    if evaluate_samples:
        # evaluate what was saved (fp16-rounded weights), exactly as users will load it
        summary["samples"] = evaluate(load_model(out), world_name=world_name)
        meta = json.loads((out / METADATA_FILE).read_text())
        meta["pretraining"] = summary
        (out / METADATA_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return summary
