"""PickScore and CLIPScore on tiny random-weight CLIPs written in the hub layout, loaded through the real path."""

import math

import numpy as np
import pytest
import torch
from PIL import Image

from reward_helpers import mixed_batch
from solrl_core.errors import SolrlError
from solrl_core.rewards import get_reward
from solrl_core.rewards.base import RewardModelSpec
from solrl_core.rewards.clip_rewards import CLIPScore, PickScore
from solrl_core.rewards.tiny import sample_batch, write_tiny_clip

CLASSES = {"pickscore": PickScore, "clipscore": CLIPScore}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("clip")
    return {
        "pickscore": write_tiny_clip(root / "PickScore_v1", 0, "gelu", math.log(1 / 0.07)),
        "clipscore": write_tiny_clip(root / "clip-vit-large-patch14", 1, "quick_gelu", math.log(100.0)),
    }


@pytest.fixture(scope="module")
def batch():
    return mixed_batch()


def _reward(name, dirs, **kw):
    return get_reward(name, {name: {"path": str(dirs[name]), **kw}})


@pytest.mark.parametrize("name", ["pickscore", "clipscore"])
def test_score_is_logit_scale_times_cosine_over_scale(name, dirs, batch):
    images, prompts = batch
    reward = _reward(name, dirs)
    scores = reward(images, prompts)
    assert scores.shape == (len(images),) and scores.dtype == np.float64 and np.all(np.isfinite(scores))
    # by hand, from the checkpoint itself: CLIP's own forward gives logits_per_image = exp(logit_scale) * cos
    from transformers import CLIPModel

    model = CLIPModel.from_pretrained(dirs[name], local_files_only=True).eval()
    tokens = reward.tokenizer(prompts, padding="max_length", max_length=77, truncation=True, return_tensors="pt")
    with torch.no_grad():
        out = model(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"], pixel_values=reward.pixels(images))
        img = out.image_embeds / out.image_embeds.norm(dim=-1, keepdim=True)
        txt = out.text_embeds / out.text_embeds.norm(dim=-1, keepdim=True)
        by_hand = model.logit_scale.exp() * (img * txt).sum(-1) / CLASSES[name].scale
    assert np.allclose(scores, out.logits_per_image.diagonal().numpy() / CLASSES[name].scale, atol=1e-5)
    assert np.allclose(scores, by_hand.numpy(), atol=1e-5)
    assert CLASSES[name].scale == {"pickscore": 26.0, "clipscore": 100.0}[name]
    # padding the text to the batch's longest prompt (the reference's padding=True) gives the same scores
    short = reward.tokenizer(prompts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out2 = model(input_ids=short["input_ids"], attention_mask=short["attention_mask"], pixel_values=reward.pixels(images))
    assert np.allclose(scores, out2.logits_per_image.diagonal().numpy() / CLASSES[name].scale, atol=1e-5)


def test_clipscore_preprocessing_is_the_reference_tensor_transform(dirs, batch):
    """The reference CLIPScore scorer: Resize(shortest edge) -> CenterCrop -> Normalize on float tensors in [0, 1]."""
    from torchvision import transforms as T

    images, _ = batch
    reward = _reward("clipscore", dirs)
    tform = T.Compose([T.Resize(32), T.CenterCrop(32), T.Normalize(reward.mean, reward.std)])
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
    ref = torch.stack([tform(img) for img in x])
    assert torch.allclose(reward.pixels(images), ref, atol=1e-5)


def test_pickscore_preprocessing_is_clip_processor_on_pil(dirs, batch):
    """PickScore's reference runs CLIPProcessor on PIL images: bicubic resize of the uint8 image, crop, normalise."""
    images, _ = batch
    reward = _reward("pickscore", dirs)
    px = reward.pixels(images).numpy()
    mean = np.array([0.48145466, 0.4578275, 0.40821073])[:, None, None]
    std = np.array([0.26862954, 0.26130258, 0.27577711])[:, None, None]
    for img, got in zip(images, px):
        small = np.asarray(Image.fromarray(img).resize((32, 32), Image.Resampling.BICUBIC), dtype=np.float64)
        expected = (small.transpose(2, 0, 1) / 255.0 - mean) / std
        assert np.allclose(got, expected, atol=1e-5)


def test_missing_files_name_the_file_and_where_to_get_it(tmp_path, dirs):
    expected = r"pickscore: no weights .* at .*nowhere.*yuvalkirstain/PickScore_v1.*reward_models\.pickscore\.path"
    with pytest.raises(SolrlError, match=expected):
        PickScore.load(RewardModelSpec(path=str(tmp_path / "nowhere")))
    with pytest.raises(SolrlError, match=r"clipscore: no weights .*configured.*openai/clip-vit-large-patch14"):
        CLIPScore.load(RewardModelSpec())
    # a model directory without processor files: PickScore says which processor to fetch
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("config.json", "model.safetensors"):
        (bare / f).write_bytes((dirs["pickscore"] / f).read_bytes())
    with pytest.raises(SolrlError, match=r"pickscore: no CLIP processor .*laion/CLIP-ViT-H-14-laion2B-s32B-b79K.*processor"):
        PickScore.load(RewardModelSpec(path=str(bare)))
    # ... and loads once pointed at one
    reward = PickScore.load(RewardModelSpec(path=str(bare), processor=str(dirs["pickscore"])))
    assert np.isfinite(reward(*sample_batch(1, 32))).all()


@pytest.mark.parametrize("name", ["pickscore", "clipscore"])
def test_logit_scale_stays_float32_in_half_precision(name, dirs):
    """bfloat16 would round the logit scale itself (ln 100 -> 4.59375: every score 1.1 % low); it is taken from the
    float32 weight."""
    half = CLASSES[name].load(RewardModelSpec(path=str(dirs[name]), dtype="bfloat16"))
    assert half.model.dtype == torch.bfloat16 and half.logit_scale.dtype == torch.float32
    stored = half.model.logit_scale.detach().float().exp()
    expected = {"pickscore": 1 / 0.07, "clipscore": 100.0}[name]  # the tiny checkpoints' logit_scale_init_value
    assert math.isclose(float(half.logit_scale), expected, rel_tol=1e-6)
    assert not math.isclose(float(stored), expected, rel_tol=1e-3)  # what the bfloat16 weight alone would give
