"""Every reward the method is evaluated on (pickscore, clipscore, hpsv2, imagereward) and jpeg, on tiny checkpoints in
the official layouts loaded through the real path: finite, deterministic, independent of batch order and batch size,
identical inputs score identically; a weighted multi-reward is the weighted sum of its parts."""

import numpy as np
import pytest

from reward_helpers import assert_batching_invariant, mixed_batch
from solrl_core.rewards import get_reward, score_images
from solrl_core.rewards.tiny import write_tiny_checkpoints

NAMES = ("pickscore", "clipscore", "hpsv2", "imagereward", "jpeg")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    return write_tiny_checkpoints(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize("name", NAMES)
def test_scores_are_invariant_to_batching(name, specs):
    images, prompts = mixed_batch()

    def load(batch_size):
        return get_reward(name, {name: {**specs.get(name, {}), "batch_size": batch_size}})

    scores = assert_batching_invariant(load, images, prompts)
    if name == "jpeg":  # minus the JPEG size in kB
        assert np.all(scores < 0)
    else:  # the text matters to the image-text rewards
        swapped = load(3)(images[:1], ["a photo of a cat"])
        assert not np.allclose(swapped, scores[:1])


def test_weighted_multi_reward_is_the_weighted_sum(specs):
    images, prompts = mixed_batch()
    weights = {"pickscore": 0.5, "clipscore": 2.0, "hpsv2": -1.5, "imagereward": 0.25, "jpeg": 0.01}
    total, per = score_images(images, prompts, weights, models=specs)
    assert list(per) == list(weights)
    for name in weights:  # each part is that reward alone
        assert np.array_equal(per[name], get_reward(name, specs)(images, prompts)), name
    expected = np.zeros(len(images))
    for name, weight in weights.items():
        expected += weight * per[name]
    assert np.array_equal(total, expected)
    assert np.allclose(total, sum(w * per[n] for n, w in weights.items()), rtol=0, atol=1e-12)
