"""HPSv2.1 on a tiny open_clip config, checkpoint written as {"state_dict": ...} like HPS_v2.1_compressed.pt."""

import argparse

import numpy as np
import pytest
import torch
from PIL import Image

from reward_helpers import mixed_batch
from solrl_core.errors import SolrlError
from solrl_core.rewards import get_reward
from solrl_core.rewards.base import RewardModelSpec
from solrl_core.rewards.hps import HPSv2
from solrl_core.rewards.tiny import write_tiny_hps


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path, arch = write_tiny_hps(tmp_path_factory.mktemp("hps"), seed=2)
    return {"path": str(path), "arch": str(arch)}


@pytest.fixture(scope="module")
def batch():
    return mixed_batch()


def _reward(tiny, **kw):
    return get_reward("hpsv2", {"hpsv2": {**tiny, **kw}})


def _hps_val_transform(image: np.ndarray, size: int) -> torch.Tensor:
    """HPSv2's inference transform, written out: to tensor, longest side to `size` (bicubic), centred zero pad,
    OpenAI CLIP normalisation."""
    from torchvision.transforms import functional as F

    x = F.to_tensor(Image.fromarray(image))
    h, w = x.shape[1:]
    scale = size / max(h, w)
    if scale != 1.0:
        nh, nw = round(h * scale), round(w * scale)
        x = F.resize(x, [nh, nw], interpolation=F.InterpolationMode.BICUBIC)
        ph, pw = size - nh, size - nw
        x = F.pad(x, [pw // 2, ph // 2, pw - pw // 2, ph - ph // 2], fill=0)
    return F.normalize(x, [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])


def test_preprocessing_is_the_hps_validation_transform(tiny):
    reward = _reward(tiny)
    rng = np.random.default_rng(5)
    for shape in [(48, 48), (40, 64), (64, 40), (32, 32)]:
        images = rng.integers(0, 256, (2, *shape, 3), dtype=np.uint8)
        expected = torch.stack([_hps_val_transform(img, 32) for img in images])
        assert torch.allclose(reward.pixels(images), expected, atol=1e-5), shape


def test_score_is_the_cosine_of_the_reference_forward(tiny, batch):
    """HPSv2's img_score: model(image, text) with normalised outputs; score = diag(image_features @ text_features.T)."""
    import open_clip

    images, prompts = batch
    scores = _reward(tiny)(images, prompts)
    assert scores.shape == (len(images),) and np.all(np.isfinite(scores)) and np.all(np.abs(scores) <= 1 + 1e-6)
    model = open_clip.create_model("solrl-tiny-hps", pretrained=None, output_dict=True)  # registered by the loader
    model.load_state_dict(torch.load(tiny["path"], weights_only=True)["state_dict"])  # strict: the official layout
    model.eval()
    tokenizer = open_clip.get_tokenizer("solrl-tiny-hps")
    with torch.no_grad():
        ref = []
        for img, prompt in zip(images, prompts):
            out = model(_hps_val_transform(img, 32).unsqueeze(0), tokenizer([prompt]))
            ref.append(torch.diagonal(out["image_features"] @ out["text_features"].T).item())
    assert np.allclose(scores, ref, atol=1e-5)


def test_real_layout_is_open_clip_vit_h_14():
    """The real checkpoint is open_clip's ViT-H-14 state dict: the default architecture and its sizes."""
    import open_clip

    from solrl_core.rewards.hps import DEFAULT_ARCH

    assert DEFAULT_ARCH == "ViT-H-14"
    cfg = open_clip.get_model_config(DEFAULT_ARCH)
    assert cfg["embed_dim"] == 1024 and cfg["vision_cfg"]["layers"] == 32 and cfg["text_cfg"]["layers"] == 24


def test_missing_and_unreadable_checkpoints(tmp_path, tiny):
    expected = r"hpsv2: no weights at .*nope\.pt; download HPS_v2\.1_compressed\.pt from xswu/HPSv2.*reward_models\.hpsv2\.path"
    with pytest.raises(SolrlError, match=expected):
        HPSv2.load(RewardModelSpec(path=str(tmp_path / "nope.pt"), arch=tiny["arch"]))
    with pytest.raises(SolrlError, match=r"hpsv2: no open_clip model config at"):
        HPSv2.load(RewardModelSpec(path=tiny["path"], arch=str(tmp_path / "missing.json")))
    # a checkpoint that needs pickled objects is refused, not executed
    pickled = tmp_path / "pickled.pt"
    torch.save({"state_dict": {}, "args": argparse.Namespace(lr=1.0)}, pickled)
    with pytest.raises(SolrlError, match=r"weights_only=True"):
        HPSv2.load(RewardModelSpec(path=str(pickled), arch=tiny["arch"]))
    # weights that do not fit the architecture
    state = torch.load(tiny["path"], weights_only=True)["state_dict"]
    state.pop("visual.proj")
    partial = tmp_path / "partial.pt"
    torch.save({"state_dict": state}, partial)
    with pytest.raises(SolrlError, match=r"does not fit open_clip solrl-tiny-hps: 1 weights missing"):
        HPSv2.load(RewardModelSpec(path=str(partial), arch=tiny["arch"]))
