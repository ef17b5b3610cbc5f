"""ImageReward on a tiny BLIP written in the official ImageReward.pt layout, checked against a direct torch
implementation of the official forward (BLIP ViT -> med BERT with cross-attention -> MLP -> (x - mean) / std)."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from reward_helpers import mixed_batch
from solrl_core.errors import SolrlError
from solrl_core.rewards import get_reward
from solrl_core.rewards.base import RewardModelSpec
from solrl_core.rewards.imagereward import SCORE_MEAN, SCORE_STD, ImageReward
from solrl_core.rewards.tiny import write_tiny_imagereward


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return {k: str(v) for k, v in write_tiny_imagereward(tmp_path_factory.mktemp("ir"), seed=3).items()}


@pytest.fixture(scope="module")
def batch():
    return mixed_batch()


def _reward(tiny, **kw):
    return get_reward("imagereward", {"imagereward": {**tiny, **kw}})


# ---- the official forward, written directly on the official state dict -------------------------------------------
def _attention(q, k, v, heads, mask=None):
    b, n, d = q.shape
    split = lambda x: x.view(b, x.shape[1], heads, d // heads).transpose(1, 2)  # noqa: E731
    scores = split(q) @ split(k).transpose(-1, -2) / math.sqrt(d // heads)
    if mask is not None:
        scores = scores + mask
    return (scores.softmax(-1) @ split(v)).transpose(1, 2).reshape(b, n, d)


def _official_score(sd, med, pixels, input_ids, attention_mask):
    p = lambda name: sd[name]  # noqa: E731
    lin = lambda x, name: F.linear(x, p(name + ".weight"), p(name + ".bias"))  # noqa: E731
    # BLIP ViT (timm layout): patch conv, [cls] + patches + pos_embed, pre-norm blocks (eps 1e-6), final norm
    v = "blip.visual_encoder."
    width = p(v + "cls_token").shape[-1]
    heads = width // 64
    patch = p(v + "patch_embed.proj.weight").shape[-1]
    x = F.conv2d(pixels, p(v + "patch_embed.proj.weight"), p(v + "patch_embed.proj.bias"), stride=patch)
    x = x.flatten(2).transpose(1, 2)
    x = torch.cat([p(v + "cls_token").expand(len(x), -1, -1), x], 1) + p(v + "pos_embed")[:, : x.shape[1] + 1]
    ln = lambda x, name, eps: F.layer_norm(x, (x.shape[-1],), p(name + ".weight"), p(name + ".bias"), eps)  # noqa: E731
    i = 0
    while f"{v}blocks.{i}.norm1.weight" in sd:
        b = f"{v}blocks.{i}."
        h = ln(x, b + "norm1", 1e-6)
        q, k, vv = lin(h, b + "attn.qkv").chunk(3, dim=-1)
        x = x + lin(_attention(q, k, vv, heads), b + "attn.proj")
        x = x + lin(F.gelu(lin(ln(x, b + "norm2", 1e-6), b + "mlp.fc1")), b + "mlp.fc2")
        i += 1
    image_embeds = ln(x, v + "norm", 1e-6)
    # med BERT: word + position embeddings, LayerNorm; per layer self-attention (padding masked with -10000),
    # cross-attention to the image tokens, feed-forward; post-LN residuals (eps from med_config)
    t = "blip.text_encoder."
    eps = med["layer_norm_eps"]
    th = med["num_attention_heads"]
    e = p(t + "embeddings.word_embeddings.weight")[input_ids] + p(t + "embeddings.position_embeddings.weight")[: input_ids.shape[1]]
    e = ln(e, t + "embeddings.LayerNorm", eps)
    mask = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
    for layer in range(med["num_hidden_layers"]):
        b = f"{t}encoder.layer.{layer}."
        a = _attention(lin(e, b + "attention.self.query"), lin(e, b + "attention.self.key"), lin(e, b + "attention.self.value"), th, mask)
        a = ln(lin(a, b + "attention.output.dense") + e, b + "attention.output.LayerNorm", eps)
        c = _attention(lin(a, b + "crossattention.self.query"), lin(image_embeds, b + "crossattention.self.key"),
                       lin(image_embeds, b + "crossattention.self.value"), th)
        c = ln(lin(c, b + "crossattention.output.dense") + a, b + "crossattention.output.LayerNorm", eps)
        f = lin(F.gelu(lin(c, b + "intermediate.dense")), b + "output.dense")
        e = ln(f + c, b + "output.LayerNorm", eps)
    feature = e[:, 0]
    for index in (0, 2, 4, 6, 7):  # Linear layers of the head; the Dropouts between them are identity at eval
        feature = lin(feature, f"mlp.layers.{index}")
    return (feature.squeeze(-1) - 0.16717362830052426) / 1.0333394966054072


def _official_pixels(image: np.ndarray, size: int) -> torch.Tensor:
    from torchvision import transforms as T

    tform = T.Compose([
        T.Resize(size, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(size), T.ToTensor(),
        T.Normalize((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)),
    ])
    return tform(Image.fromarray(image).convert("RGB"))


def test_score_equals_the_official_forward_on_the_same_weights(tiny, batch):
    images, prompts = batch
    reward = _reward(tiny)
    scores = reward(images, prompts)
    assert scores.shape == (len(images),) and np.all(np.isfinite(scores))
    assert (SCORE_MEAN, SCORE_STD) == (0.16717362830052426, 1.0333394966054072)
    sd = torch.load(tiny["path"], weights_only=True)
    med = json.loads(open(tiny["med_config"]).read())
    pixels = torch.stack([_official_pixels(img, 32) for img in images])
    assert torch.allclose(reward.pixels(images), pixels, atol=1e-6)
    tokens = reward.tokenizer(prompts, padding="max_length", truncation=True, max_length=35, return_tensors="pt")
    with torch.no_grad():
        ref = _official_score(sd, med, pixels, tokens["input_ids"], tokens["attention_mask"])
    assert np.allclose(scores, ref.numpy(), atol=1e-5), (scores, ref)
    assert scores.std() > 1e-3  # the tiny weights give distinct scores, so the comparison means something


def test_tokenizer_is_bert_uncased_plus_blip_tokens(tiny):
    reward = _reward(tiny)
    tok = reward.tokenizer
    vocab = open(tiny["tokenizer"] + "/vocab.txt").read().split()
    ids = tok(["A Red Circle"], padding="max_length", truncation=True, max_length=35)["input_ids"][0]
    assert len(ids) == 35
    assert ids[:5] == [vocab.index("[CLS]"), vocab.index("a"), vocab.index("red"), vocab.index("circle"), vocab.index("[SEP]")]
    assert set(ids[5:]) == {vocab.index("[PAD]")}
    assert tok.convert_tokens_to_ids(["[DEC]", "[ENC]"]) == [len(vocab), len(vocab) + 1]
    assert len(tok(["word " * 100], truncation=True, max_length=35)["input_ids"][0]) == 35


def test_missing_files_and_bad_checkpoints(tmp_path, tiny):
    expected = r"imagereward: no weights at .*none\.pt; download ImageReward\.pt from THUDM/ImageReward.*reward_models\.imagereward\.path"
    with pytest.raises(SolrlError, match=expected):
        ImageReward.load(RewardModelSpec(path=str(tmp_path / "none.pt")))
    with pytest.raises(SolrlError, match=r"imagereward: no med_config\.json at .*med\.json"):
        ImageReward.load(
            RewardModelSpec(path=tiny["path"], med_config=str(tmp_path / "med.json"), tokenizer=tiny["tokenizer"])
        )
    lonely = tmp_path / "alone" / "ImageReward.pt"
    lonely.parent.mkdir()
    lonely.write_bytes(open(tiny["path"], "rb").read())
    (lonely.parent / "med_config.json").write_text(open(tiny["med_config"]).read())
    expected = r"imagereward: no bert-base-uncased tokenizer .*google-bert/bert-base-uncased.*reward_models\.imagereward\.tokenizer"
    with pytest.raises(SolrlError, match=expected):
        ImageReward.load(RewardModelSpec(path=str(lonely)))
    # med_config.json next to the checkpoint and an explicit tokenizer are enough
    assert ImageReward.load(RewardModelSpec(path=str(lonely), tokenizer=tiny["tokenizer"])).batch_size == 16
    # a checkpoint missing weights is an error (the reference's strict=False would score with random weights)
    sd = torch.load(tiny["path"], weights_only=True)
    sd.pop("blip.text_encoder.encoder.layer.1.crossattention.self.key.weight")
    broken = tmp_path / "broken.pt"
    torch.save(sd, broken)
    with pytest.raises(SolrlError, match=r"blip\.text_encoder has 1 missing .*crossattention\.self\.key\.weight"):
        ImageReward.load(RewardModelSpec(path=str(broken), med_config=tiny["med_config"], tokenizer=tiny["tokenizer"]))
    # a tokenizer that does not fit med_config's vocabulary
    small = tmp_path / "vocab.txt"
    small.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n")
    with pytest.raises(SolrlError, match=r"tokenizer .* has 8 tokens .* vocab_size is"):
        ImageReward.load(RewardModelSpec(path=tiny["path"], med_config=tiny["med_config"], tokenizer=str(small)))
