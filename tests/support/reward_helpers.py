"""Shared checks of the reward tests: an input batch with repeats and odd shapes, and the invariances every reward
must have (deterministic, finite, independent of batch order and batch size, identical inputs score identically)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from PIL import Image

from solrl_core.rewards.tiny import sample_batch


def mixed_batch(size: int = 48) -> tuple[np.ndarray, list[str]]:
    """Renders of the shapes world for their prompts, plus noise images resized from a non-square shape (exercising
    resize and crop/pad) with prompts of other kinds (capitals, punctuation, words outside the shapes world)."""
    images, prompts = sample_batch(4, size)
    rng = np.random.default_rng(3)
    noise = rng.integers(0, 256, (3, 40, 56, 3), dtype=np.uint8)
    noise = np.stack([np.asarray(Image.fromarray(n).resize((size, size))) for n in noise])
    extra = ["an astronaut riding a horse", "A Photo of a CAT, at night!", "a red circle"]
    return np.concatenate([images, noise]), prompts + extra


def assert_batching_invariant(load: Callable[[int], object], images: np.ndarray, prompts: list[str]) -> np.ndarray:
    """`load(batch_size)` gives the reward under test. Returns its scores of (images, prompts) after checking them."""
    reward = load(3)
    first = reward(images, prompts)
    assert first.shape == (len(images),) and first.dtype == np.float64 and np.all(np.isfinite(first))
    assert np.array_equal(first, reward(images, prompts))  # deterministic
    assert first.std() > 0  # distinct inputs score differently: the comparisons below can fail
    order = np.random.default_rng(0).permutation(len(images))
    assert np.allclose(reward(images[order], [prompts[i] for i in order]), first[order], rtol=0, atol=1e-5)
    for batch_size in (1, 16):
        assert np.allclose(load(batch_size)(images, prompts), first, rtol=0, atol=1e-5), batch_size
    # identical (image, prompt) pairs score identically wherever they sit in a batch
    dup = reward(np.concatenate([images[:2], images[:2]]), prompts[:2] * 2)
    assert np.allclose(dup[:2], dup[2:], rtol=0, atol=1e-6) and np.allclose(dup[:2], first[:2], rtol=0, atol=1e-5)
    return first
