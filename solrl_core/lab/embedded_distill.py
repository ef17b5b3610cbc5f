"""Lab: how the embedded world's learned reward (solrl_core/models/embedded/scorer.py) is distilled from the programmatic
reward (`solrl distill-reward`; reproduces the shipped weights).

As PickScore and HPS learn people's preferences from labelled images, this scorer learns the programmatic
prompt-match reward (`solrl_core/rewards/embedded.py`, which stays the *gold* evaluator) from labelled samples, and is
then used as a reward model with the errors of one: RL trained on it can exploit them, and an evaluation that also
scores gold (`eval.gold`) shows the gap (the learned reward rising while the gold one does not).

Model (`PromptImageScorer`): the prompt as the bag of its words (the grammar's vocabulary) -> an embedding that scales
and shifts (FiLM) every stage of a small CNN over the 32x32 image; one output in [0, 1] (a sigmoid).

Data (`build_dataset`), training prompts only: for each prompt a group of images, each labelled with its gold reward
*for that prompt*: samples of the pretrained embedded model at several step counts, renders of the prompt's own
scene, and images made for other prompts (samples and renders), which teach what does not match.
Loss: squared error to gold plus, within each group, a pairwise logistic loss on the order of every two images
(Bradley-Terry, as preference models are trained), so the ranking of one prompt's candidates - what the method selects
on - is learned, not only the level.
Held out: the test prompts' groups; their agreement with gold (Pearson over all, Spearman within prompt on the
model's samples) is stored beside the weights in `scorer.json`.
"""


from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn
from tqdm.auto import tqdm

from solrl_core.worlds import shapes
from solrl_core.models.embedded.model import images_to_latents
from solrl_core.models.embedded.scorer import FORMAT, PromptImageScorer
from solrl_core.models.embedded.scorer_files import METADATA_FILE, WEIGHTS_FILE

# The recipe of the shipped weights (solrl_core/models/embedded/scorer/).
DEFAULT_RECIPE = dict(seeds_per_prompt=12, sample_steps=(3, 6, 10), renders_per_prompt=8, foreign_per_prompt=16,
                      widths=(16, 32, 64), epochs=45, batch_groups=16, group_size=16, lr=2e-3, pair_weight=1.0,
                      seed=0)


@dataclass
class Groups:
    """Images grouped by the prompt they are scored for: images (M, 32, 32, 3) uint8, prompt per image, gold (M,),
    group id (M,), and whether the image is the pretrained model's sample of that same prompt (M,)."""

    images: np.ndarray
    prompts: list[str]
    gold: np.ndarray
    group: np.ndarray
    own_sample: np.ndarray


def build_dataset(prompts: list[str], recipe: dict, seed: int, progress: bool = True) -> Groups:
    """Each prompt's group: the model's own samples, renders, and foreign images, labelled by the gold reward."""
    from solrl_core.models.backbones.embedded import PRETRAINED_DIR
    from solrl_core.models.embedded.model import load_model
    from solrl_core.lab.embedded_pretrain import sample_rewards
    from solrl_core.rewards.embedded import prompt_match_reward

    rng = np.random.default_rng(seed)
    model = load_model(PRETRAINED_DIR)
    n_seeds = recipe["seeds_per_prompt"]
    samples = []  # per step count: (P * S, H, W, 3), prompt-major
    for steps in tqdm(recipe["sample_steps"], desc="sample", disable=not progress):
        seeds = [int(s) for s in rng.integers(0, 2**31 - 1, n_seeds)]
        samples.append(sample_rewards(model, prompts, seeds, steps)[0].reshape(len(prompts), n_seeds, 32, 32, 3))
    samples = np.concatenate(samples, axis=1)  # (P, S * steps, ...)
    renders = np.stack([shapes.render_batch([p] * recipe["renders_per_prompt"], rng) for p in prompts])
    images, owners, group, own = [], [], [], []
    for g, prompt in enumerate(prompts):
        others = np.array([i for i in range(len(prompts)) if i != g])
        foreign = []
        for _ in range(recipe["foreign_per_prompt"]):
            o = int(rng.choice(others))
            pool = samples[o] if rng.random() < 0.5 else renders[o]
            foreign.append(pool[rng.integers(len(pool))])
        members = [samples[g], renders[g], np.stack(foreign)]
        images += members
        n = sum(len(m) for m in members)
        owners += [prompt] * n
        group += [g] * n
        own += [True] * len(samples[g]) + [False] * (n - len(samples[g]))
    images = np.concatenate(images)
    gold = prompt_match_reward(images, owners)["reward"]
    return Groups(images, owners, np.asarray(gold, dtype=np.float64), np.asarray(group), np.asarray(own))


# ---------------------------------------------------------------------------------------------- training


def _pair_loss(logits: torch.Tensor, gold: torch.Tensor, group: torch.Tensor, margin: float = 0.02) -> torch.Tensor:
    """Mean logistic loss over every two images of one group whose gold rewards differ by more than `margin`."""
    same = group[:, None] == group[None, :]
    diff = gold[:, None] - gold[None, :]
    pairs = same & (diff > margin)
    if not pairs.any():
        return logits.sum() * 0.0
    return nn.functional.softplus(-(logits[:, None] - logits[None, :])[pairs]).mean()


def agreement(pred: np.ndarray, data: Groups) -> dict:
    """How well scores agree with gold: Pearson over all images, Spearman and Kendall within each prompt's own model
    samples (the candidates RL ranks), mean absolute error."""
    from scipy import stats

    within_s, within_k = [], []
    for g in np.unique(data.group):
        m = (data.group == g) & data.own_sample
        if np.ptp(data.gold[m]) > 0:
            within_s.append(stats.spearmanr(pred[m], data.gold[m]).statistic)
            within_k.append(stats.kendalltau(pred[m], data.gold[m]).statistic)
    return {
        "pearson": round(float(np.corrcoef(pred, data.gold)[0, 1]), 4),
        "spearman_within_prompt": round(float(np.nanmean(within_s)), 4),
        "kendall_within_prompt": round(float(np.nanmean(within_k)), 4),
        "mean_abs_error": round(float(np.abs(pred - data.gold).mean()), 4),
        "images": int(len(pred)),
    }


def train_scorer(train: Groups, recipe: dict, progress: bool = True) -> tuple[PromptImageScorer, list]:
    """A scorer trained on `train`'s groups: batches of `batch_groups` groups x `group_size` images; squared error to
    gold + `pair_weight` x the within-group pairwise loss; AdamW with a one-cycle rate. (model, loss per epoch)."""
    torch.manual_seed(recipe["seed"])
    model = PromptImageScorer(shapes.vocabulary(), recipe["widths"])
    x_all = images_to_latents(train.images)
    w_all = model.words(train.prompts)
    gold_all = torch.from_numpy(train.gold).float()
    group_all = torch.from_numpy(train.group)
    # the gold reward is left-right symmetric unless the prompt names left or right: flip those images at random
    flippable = torch.tensor(["left" not in p and "right" not in p for p in train.prompts])
    by_group = [np.flatnonzero(train.group == g) for g in np.unique(train.group)]
    steps_per_epoch = max(1, len(train.gold) // (recipe["batch_groups"] * recipe["group_size"]))
    total = recipe["epochs"] * steps_per_epoch
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe["lr"], weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=recipe["lr"], total_steps=total)
    rng = np.random.default_rng(recipe["seed"])
    curve, losses = [], []
    model.train()
    for step in tqdm(range(total), desc="distill", disable=not progress):
        chosen = rng.choice(len(by_group), recipe["batch_groups"], replace=False)
        idx = torch.from_numpy(np.concatenate(
            [rng.choice(by_group[g], min(recipe["group_size"], len(by_group[g])), replace=False) for g in chosen]))
        x = x_all[idx]
        flip = flippable[idx] & torch.from_numpy(rng.random(len(idx)) < 0.5)
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
        logits = model.logits(x, w_all[idx])
        gold = gold_all[idx]
        loss = nn.functional.mse_loss(torch.sigmoid(logits), gold) + recipe["pair_weight"] * _pair_loss(
            logits, gold, group_all[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(float(loss.item()))
        if (step + 1) % steps_per_epoch == 0:
            curve.append([step + 1, round(float(np.mean(losses[-steps_per_epoch:])), 5)])
    return model.eval(), curve


def distill(out_dir: str | Path, recipe: dict | None = None, progress: bool = True, threads: int = 2) -> dict:
    """Build the data, train the scorer, save it to `out_dir` (weights + scorer.json with the held-out agreement)."""
    recipe = {**DEFAULT_RECIPE, **(recipe or {})}
    torch.set_num_threads(threads)
    start = time.perf_counter()
    train = build_dataset(shapes.train_prompts(), recipe, recipe["seed"], progress)
    test = build_dataset(shapes.test_prompts(), recipe, recipe["seed"] + 1, progress)
    model, curve = train_scorer(train, recipe, progress)
    summary = {
        "format": FORMAT,
        "vocabulary": model.vocabulary,
        "recipe": {k: list(v) if isinstance(v, tuple) else v for k, v in recipe.items()},
        "threads": threads,
        "train_images": int(len(train.gold)),
        "seconds": round(time.perf_counter() - start, 1),
        "loss_curve": curve,
        "agreement_train": agreement(model.score(train.images, train.prompts), train),
        "agreement_held_out": agreement(model.score(test.images, test.prompts), test),
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, out / WEIGHTS_FILE)
    (out / METADATA_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    return summary
