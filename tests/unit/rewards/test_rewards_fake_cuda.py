"""Every torch reward of the registry on a faked GPU (solrl_core/testing/fake_cuda.py): its weights and inputs on the
device, no CPU tensor meeting a CUDA one, one read-back per batch, and its dtype by default bfloat16 on CUDA and
float32 on the CPU (where the scores stay bit-identical to an explicit float32)."""

import json

import numpy as np
import pytest
import torch

from solrl_core.errors import SolrlError
from solrl_core.rewards.base import Reward, parse_spec, torch_dtype
from solrl_core.rewards.registry import REWARDS
from solrl_core.rewards.tiny import sample_batch, write_tiny_checkpoints
from solrl_core.testing.fake_cuda import fake_cuda, is_fake

TORCH_REWARDS = sorted(name for name, cls in REWARDS.items() if cls.uses_torch)
WITH_PIXELS = [name for name in TORCH_REWARDS if hasattr(REWARDS[name], "pixels")]
HALF_ON_CUDA = [name for name in TORCH_REWARDS if REWARDS[name].cuda_dtype == "bfloat16"]
# modules kept in float32 whatever the dtype: ImageReward's MLP head (the reference runs it in float32)
FLOAT32_MODULES = {"imagereward": {"head"}}
READ_BACKS = {"to cpu", "numpy"}  # reading a batch's scores; never `.item()` / `.tolist()`

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    """`reward_models:` of the tiny checkpoints; rewards that ship their weights (embedded_learned) need none."""
    return write_tiny_checkpoints(tmp_path_factory.mktemp("tiny_rewards"))


def _load(name, specs, **keys):
    """A fresh reward (not the registry's cache, which would keep fake tensors past the fake_cuda block)."""
    cls = REWARDS[name]
    return cls.load(parse_spec(name, {**specs.get(name, {}), **keys}, cls.spec_keys))


def _batch(name, n, size):
    """(images, prompts) for reward `name`: two-frame videos of that size for a reward of videos."""
    return sample_batch(n, size, frames=2 if REWARDS[name].takes_videos else None)


def _score(reward, images, prompts):
    """The reward's scores; a reward that scores edits gets each image's neighbour as its source."""
    if reward.edits:
        return reward(images, prompts, sources=np.roll(images, 1, axis=0)[:, None])
    return reward(images, prompts)


def _modules(reward) -> dict[str, torch.nn.Module]:
    return {key: value for key, value in vars(reward).items() if isinstance(value, torch.nn.Module)}


def _tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    """Parameters and floating buffers of a module."""
    return list(module.parameters()) + [b for b in module.buffers() if b.is_floating_point()]


def test_the_registry_has_torch_rewards_to_check():
    assert {"pickscore", "clipscore", "hpsv2", "imagereward", "embedded_learned", "flow_motion"} <= set(TORCH_REWARDS)
    assert Reward.cuda_dtype == "bfloat16"
    assert {"pickscore", "clipscore", "hpsv2", "imagereward"} <= set(HALF_ON_CUDA)


def _assert_dtype(name, reward, expected):
    """The reward resolved `expected`, records it in its fingerprint, and holds its modules in it."""
    assert reward.dtype == expected
    assert json.loads(reward.fingerprint())["dtype"] == expected
    modules = _modules(reward)
    assert modules, name
    for key, module in modules.items():
        want = torch.float32 if key in FLOAT32_MODULES.get(name, ()) else torch_dtype(expected)
        assert {w.dtype for w in _tensors(module)} == {want}, key


@pytest.mark.parametrize("name", TORCH_REWARDS)
def test_scores_on_the_gpu_in_its_cuda_dtype_with_one_read_back_per_batch(name, specs):
    images, prompts = _batch(name, 6, 32)  # embedded_learned scores 32 x 32 images only
    syncs = {}
    with fake_cuda() as fc:
        reward = _load(name, specs, device="cuda", batch_size=2)
        weights = [w for module in _modules(reward).values() for w in _tensors(module)]
        assert weights and all(is_fake(w) and w.device.type == "cuda" for w in weights)
        _assert_dtype(name, reward, REWARDS[name].cuda_dtype)
        if name in WITH_PIXELS:  # preprocessing ends on the device, in the model's dtype
            pixels = reward.pixels(images[:3])
            assert is_fake(pixels) and pixels.device.type == "cuda" and pixels.shape[:2] == (3, 3)
            assert pixels.dtype == torch_dtype(reward.dtype) == torch.bfloat16
        for n in (2, 6):  # one batch, three batches
            before = len(fc.syncs)
            scores = _score(reward, images[:n], prompts[:n])
            assert isinstance(scores, np.ndarray) and scores.dtype == np.float64 and scores.shape == (n,)
            syncs[n] = fc.syncs[before:]
    assert (len(syncs[2]), len(syncs[6])) == (1, 3), [str(s) for s in syncs[6]]
    assert {s.kind for s in syncs[6]} <= READ_BACKS, [str(s) for s in syncs[6]]


@pytest.mark.parametrize("name", TORCH_REWARDS)
def test_an_explicit_dtype_or_the_cpu_gives_float32(name, specs):
    for keys in ({"device": "cuda", "dtype": "float32"}, {"device": "cpu"}):
        with fake_cuda():
            _assert_dtype(name, _load(name, specs, **keys), "float32")


@pytest.mark.parametrize("name", TORCH_REWARDS)
def test_cpu_default_scores_exactly_as_float32(name, specs):
    images, prompts = _batch(name, 4, 32)
    default = _score(_load(name, specs, device="cpu"), images, prompts)
    explicit = _score(_load(name, specs, device="cpu", dtype="float32"), images, prompts)
    assert np.array_equal(default, explicit)


@pytest.mark.parametrize("name", HALF_ON_CUDA)
def test_bfloat16_computes_and_reads_back_float64(name, specs):
    """Real bfloat16 arithmetic on the CPU (the fake GPU does not check matmul dtypes): every input the model meets is
    in its dtype, and the scores are float64 near the float32 ones."""
    images, prompts = sample_batch(4, 40)
    half = _score(_load(name, specs, dtype="bfloat16"), images, prompts)
    full = _score(_load(name, specs, dtype="float32"), images, prompts)
    assert half.dtype == np.float64 and np.all(np.isfinite(half))
    assert not np.array_equal(half, full)  # it did run in bfloat16
    assert np.abs(half - full).max() < 0.1 * np.ptp(full), (half, full)


@pytest.mark.parametrize("name", sorted(set(TORCH_REWARDS) - set(HALF_ON_CUDA)))
def test_float32_only_rewards_refuse_another_dtype(name, specs):
    with pytest.raises(SolrlError, match=rf"reward_models\.{name}\.dtype"):
        _load(name, specs, dtype="bfloat16")


def test_rewards_without_torch_keep_float32_on_cuda():
    """Their dtype means nothing, and their fingerprints (pool scores kept across runs) must not change."""
    for name, cls in REWARDS.items():
        if not cls.uses_torch and not cls.needs_server:
            reward = cls.load(parse_spec(name, {"device": "cuda"}, cls.spec_keys))
            assert reward.dtype == "float32" and json.loads(reward.fingerprint())["dtype"] == "float32"
