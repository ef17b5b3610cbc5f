"""Tiny random-weight reward models written in the official file layouts, to exercise the real loading paths.

`write_tiny_checkpoints(out_dir)` writes, under the default layout of $SOLRL_REWARD_MODELS_DIR:
  PickScore_v1/             transformers CLIPModel (config.json + model.safetensors) and CLIP processor files
                            (preprocessor_config.json in the old int-size format of the hub repos, tokenizer.json
                            rebuilt from open_clip's bundled CLIP BPE vocabulary: real CLIP token ids)
  clip-vit-large-patch14/   the same for CLIPScore (quick_gelu, logit_scale ln 100, as OpenAI's ViT-L/14)
  hpsv2/HPS_v2.1_compressed.pt + hpsv2/solrl-tiny-hps.json
                            {"state_dict": open_clip state dict} of a tiny open_clip config (the real file is the
                            same dict for open_clip's ViT-H-14); the JSON is the architecture (reward_models.hpsv2.arch)
  ImageReward/ImageReward.pt + med_config.json + bert-base-uncased/vocab.txt
                            the official BLIP key layout (blip.visual_encoder.* timm-style ViT, blip.text_encoder.* med
                            BERT with cross-attention, blip.vision_proj/text_proj, mlp.layers.{0,2,4,6,7}), written
                            here from the layout itself (not from the loader's classes), and a tiny WordPiece vocab
  reward_models.yaml        a `reward_models:` config section pointing at all of them
and returns that section as {reward name: spec dict}.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import yaml

TINY_HPS_CONFIG = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "head_width": 16, "patch_size": 8},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}
_WORDS = (
    "a an the of on in with and to at is two three four photo picture image painting red green blue yellow cyan "
    "magenta white black orange purple circle circles square squares triangle triangles left right top bottom cat "
    "dog horse astronaut riding city night sky tree house car"
).split()


def clip_tokenizer():
    """A transformers CLIPTokenizer with the real CLIP vocabulary, rebuilt from open_clip's bundled BPE file."""
    from open_clip.tokenizer import SimpleTokenizer
    from transformers import CLIPTokenizer

    simple = SimpleTokenizer()
    rename = {"<start_of_text>": "<|startoftext|>", "<end_of_text>": "<|endoftext|>"}
    vocab = {rename.get(token, token): index for token, index in simple.encoder.items()}
    merges = [pair for pair, _ in sorted(simple.bpe_ranks.items(), key=lambda kv: kv[1])]
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)


def write_tiny_clip(out: Path, seed: int, hidden_act: str, logit_scale: float, image_size: int = 32) -> Path:
    """A tiny CLIPModel + processor directory in the hub layout of PickScore_v1 / openai CLIP."""
    import torch
    from transformers import CLIPConfig, CLIPModel

    from solrl_core.rewards.model_files import quiet_logs

    torch.manual_seed(seed)
    text = dict(vocab_size=49408, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                max_position_embeddings=77, hidden_act=hidden_act, bos_token_id=49406, eos_token_id=49407, pad_token_id=49407)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  image_size=image_size, patch_size=8, hidden_act=hidden_act)
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=16, logit_scale_init_value=logit_scale)
    model = CLIPModel(config).eval()
    out.mkdir(parents=True, exist_ok=True)
    with quiet_logs():
        model.save_pretrained(out)
    clip_tokenizer().save_pretrained(out)
    processor = {
        "crop_size": image_size, "do_center_crop": True, "do_normalize": True, "do_resize": True,
        "feature_extractor_type": "CLIPFeatureExtractor", "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "size": image_size,
    }
    (out / "preprocessor_config.json").write_text(json.dumps(processor, indent=2))
    return out


def write_tiny_hps(out: Path, seed: int) -> tuple[Path, Path]:
    """(checkpoint, architecture JSON) of a tiny HPS: {"state_dict": open_clip state dict} as HPS_v2.1_compressed.pt."""
    import open_clip
    import torch

    from solrl_core.rewards.hps import register_arch
    from solrl_core.rewards.model_files import quiet_logs

    out.mkdir(parents=True, exist_ok=True)
    arch = out / "solrl-tiny-hps.json"
    arch.write_text(json.dumps(TINY_HPS_CONFIG, indent=2))
    torch.manual_seed(seed)
    with quiet_logs():
        model = open_clip.create_model(register_arch(str(arch)), pretrained=None)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    path = out / "HPS_v2.1_compressed.pt"
    torch.save({"state_dict": state}, path)
    return path, arch


def tiny_wordpiece_vocab() -> list[str]:
    """A small uncased WordPiece vocabulary: BERT's special tokens, characters, '##' characters and a few words."""
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789")
    punct = list(".,!?'\"-:;()&/")
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + punct + ["##" + c for c in chars] + _WORDS
    return list(dict.fromkeys(tokens))


def official_imagereward_state_dict(
    vocab_size: int, seed: int, vit_width: int = 128, vit_depth: int = 2, patch: int = 16, image_size: int = 32,
    hidden: int = 32, layers: int = 2, intermediate: int = 64, max_positions: int = 40, embed_dim: int = 256,
) -> dict:
    """Random weights under the official ImageReward.pt names and shapes (BLIP ViT + med BERT + MLP head)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    sd: dict[str, torch.Tensor] = {}

    def linear(name: str, n_out: int, n_in: int) -> None:
        sd[name + ".weight"] = torch.randn(n_out, n_in, generator=gen) / math.sqrt(n_in)
        sd[name + ".bias"] = 0.02 * torch.randn(n_out, generator=gen)

    def norm(name: str, n: int) -> None:
        sd[name + ".weight"] = 1.0 + 0.1 * torch.randn(n, generator=gen)
        sd[name + ".bias"] = 0.05 * torch.randn(n, generator=gen)

    v = "blip.visual_encoder."
    positions = (image_size // patch) ** 2 + 1
    sd[v + "cls_token"] = 0.5 * torch.randn(1, 1, vit_width, generator=gen)
    sd[v + "pos_embed"] = 0.5 * torch.randn(1, positions, vit_width, generator=gen)
    sd[v + "patch_embed.proj.weight"] = torch.randn(vit_width, 3, patch, patch, generator=gen) / math.sqrt(3 * patch * patch)
    sd[v + "patch_embed.proj.bias"] = 0.02 * torch.randn(vit_width, generator=gen)
    for i in range(vit_depth):
        b = f"{v}blocks.{i}."
        norm(b + "norm1", vit_width)
        linear(b + "attn.qkv", 3 * vit_width, vit_width)
        linear(b + "attn.proj", vit_width, vit_width)
        norm(b + "norm2", vit_width)
        linear(b + "mlp.fc1", 4 * vit_width, vit_width)
        linear(b + "mlp.fc2", vit_width, 4 * vit_width)
    norm(v + "norm", vit_width)

    t = "blip.text_encoder."
    sd[t + "embeddings.word_embeddings.weight"] = torch.randn(vocab_size, hidden, generator=gen)
    sd[t + "embeddings.position_embeddings.weight"] = 0.5 * torch.randn(max_positions, hidden, generator=gen)
    norm(t + "embeddings.LayerNorm", hidden)
    sd[t + "embeddings.position_ids"] = torch.arange(max_positions).expand(1, -1).clone()
    for i in range(layers):
        b = f"{t}encoder.layer.{i}."
        for part, kv_width in (("attention", hidden), ("crossattention", vit_width)):
            linear(b + part + ".self.query", hidden, hidden)
            linear(b + part + ".self.key", hidden, kv_width)
            linear(b + part + ".self.value", hidden, kv_width)
            linear(b + part + ".output.dense", hidden, hidden)
            norm(b + part + ".output.LayerNorm", hidden)
        linear(b + "intermediate.dense", intermediate, hidden)
        linear(b + "output.dense", hidden, intermediate)
        norm(b + "output.LayerNorm", hidden)
    linear("blip.vision_proj", embed_dim, vit_width)
    linear("blip.text_proj", embed_dim, hidden)
    widths = [hidden, 1024, 128, 64, 16, 1]
    for index, (n_in, n_out) in zip((0, 2, 4, 6, 7), zip(widths[:-1], widths[1:])):
        linear(f"mlp.layers.{index}", n_out, n_in)
    return sd


def write_tiny_imagereward(out: Path, seed: int) -> dict[str, Path]:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    vocab = tiny_wordpiece_vocab()
    tok_dir = out / "bert-base-uncased"
    tok_dir.mkdir(exist_ok=True)
    (tok_dir / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (tok_dir / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    vocab_size = len(vocab) + 2  # + BLIP's [DEC] and [ENC]
    med = {
        "architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64,
        "layer_norm_eps": 1e-12, "max_position_embeddings": 40, "model_type": "bert", "num_attention_heads": 2,
        "num_hidden_layers": 2, "pad_token_id": 0, "type_vocab_size": 2, "vocab_size": vocab_size,
        "encoder_width": 128, "add_cross_attention": True,
    }
    (out / "med_config.json").write_text(json.dumps(med, indent=2))
    path = out / "ImageReward.pt"
    torch.save(official_imagereward_state_dict(vocab_size, seed), path)
    return {"path": path, "med_config": out / "med_config.json", "tokenizer": tok_dir}


def write_tiny_raft(out: Path, seed: int) -> Path:
    """torchvision's RAFT-small with random weights, saved as torchvision's checkpoint file (its real size: 1 M
    parameters, 4 MB)."""
    import torch
    from torchvision.models.optical_flow import raft_small

    from solrl_core.rewards.optical_flow import ARCHS

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    path = out / ARCHS["raft_small"][1]
    torch.save(raft_small(weights=None, progress=False).state_dict(), path)
    return path


def write_tiny_checkpoints(out_dir: str | Path, seed: int = 0) -> dict[str, dict]:
    """Write every tiny reward model under `out_dir`; return the `reward_models:` section that loads them."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specs: dict[str, dict] = {}
    specs["pickscore"] = {"path": str(write_tiny_clip(out / "PickScore_v1", seed, "gelu", math.log(1 / 0.07)))}
    specs["clipscore"] = {"path": str(write_tiny_clip(out / "clip-vit-large-patch14", seed + 1, "quick_gelu", math.log(100.0)))}
    specs["clip_edit"] = dict(specs["clipscore"])  # CLIPScore's model, scoring edits against their sources
    hps_path, hps_arch = write_tiny_hps(out / "hpsv2", seed + 2)
    specs["hpsv2"] = {"path": str(hps_path), "arch": str(hps_arch)}
    specs["imagereward"] = {k: str(v) for k, v in write_tiny_imagereward(out / "ImageReward", seed + 3).items()}
    # RAFT-small with 2 flow updates instead of 20: the same computation, a tenth of the CPU time
    specs["flow_motion"] = {"path": str(write_tiny_raft(out / "raft", seed + 4)), "arch": "raft_small", "flow_updates": 2}
    specs["flow_smoothness"] = dict(specs["flow_motion"])  # the same RAFT, scoring how frames follow the flow
    (out / "reward_models.yaml").write_text(yaml.safe_dump({"reward_models": specs}, sort_keys=False))
    return specs


def sample_batch(n: int = 4, size: int = 64, seed: int = 0,
                 frames: int | None = None) -> tuple[np.ndarray, list[str]]:
    """A small deterministic (uint8 images (n, size, size, 3), prompts) batch: renders of the embedded shapes world,
    upscaled, so every reward (including "embedded") has something meaningful to score. With `frames`, videos
    (n, frames, size, size, 3) of the embedded motion world and its prompts ("embedded_motion" scores them)."""
    from PIL import Image

    from solrl_core.worlds import motion, shapes

    rng = np.random.default_rng(seed)
    if frames is None:
        prompts = ["a red circle", "two blue squares", "three green triangles", "a yellow square on the left"]
        prompts = [prompts[i % len(prompts)] for i in range(n)]
        small = shapes.render_batch(prompts, rng)
    else:
        prompts = ["a red circle moving left", "a blue square moving up", "a green triangle moving right"]
        prompts = [prompts[i % len(prompts)] for i in range(n)]
        small = motion.render_batch(prompts, rng, max(frames, 2))[:, :frames]

    def resized(image: np.ndarray) -> np.ndarray:
        return np.asarray(Image.fromarray(image).resize((size, size), Image.Resampling.NEAREST))

    if frames is None:
        return np.stack([resized(img) for img in small]), prompts
    return np.stack([np.stack([resized(f) for f in video]) for video in small]), prompts


def sample_edit_batch(n: int = 4, size: int = 64, seed: int = 0) -> tuple[np.ndarray, list[str], np.ndarray]:
    """A small deterministic edit batch of the embedded editing world: (the edits' answers uint8 (n, size, size, 3),
    their edit prompts, their sources (n, 1, size, size, 3)), upscaled, for the rewards that score edits."""
    from PIL import Image

    from solrl_core.worlds import edits

    chosen = edits.test_edits()[:: max(1, len(edits.test_edits()) // n)][:n]
    sources, targets = edits.render_pairs(chosen, np.random.default_rng(seed))

    def resized(images: np.ndarray) -> np.ndarray:
        return np.stack([np.asarray(Image.fromarray(im).resize((size, size), Image.Resampling.NEAREST))
                         for im in images])

    return resized(targets), [edit.prompt for edit in chosen], resized(sources)[:, None]
