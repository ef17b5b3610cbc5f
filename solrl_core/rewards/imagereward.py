"""ImageReward v1.0 on transformers' BLIP classes, loading the official ImageReward.pt through a key mapping.

The official model (THUDM/ImageReward) is BLIP: a ViT image encoder ("large": 224 px, patch 16, width 1024, 24
blocks, 16 heads, LayerNorm eps 1e-6), a BERT text encoder whose layers cross-attend to the image tokens (the "med"
BERT, configured by med_config.json) and an MLP head of five Linear layers (768 -> 1024 -> 128 -> 64 -> 16 -> 1,
dropout between them and no activation). Score of (image, prompt):
    feature = text_encoder(tokens(prompt), cross-attending to vit(image)).last_hidden_state[:, 0]
    score   = (mlp(feature) - 0.16717362830052426) / 1.0333394966054072
Tokens: bert-base-uncased WordPiece plus the two tokens BLIP adds ([DEC] as bos, [ENC] as an extra special token;
30524 ids, med_config's vocab_size), padded/truncated to 35. Image: PIL bicubic resize of the shortest edge to 224,
centre crop, to [0, 1], CLIP mean/std - as the reference `ImageReward._transform`.

transformers' BlipVisionModel is this ViT and BlipTextModel (built with is_decoder=True so its layers have
cross-attention, run as an encoder) is the med BERT; only the ViT's parameter names differ:
    blip.visual_encoder.cls_token            -> vision.embeddings.class_embedding
    blip.visual_encoder.pos_embed            -> vision.embeddings.position_embedding
    blip.visual_encoder.patch_embed.proj.*   -> vision.embeddings.patch_embedding.*
    blip.visual_encoder.blocks.N.norm1/norm2 -> vision.encoder.layers.N.layer_norm1/layer_norm2
    blip.visual_encoder.blocks.N.attn.qkv    -> vision.encoder.layers.N.self_attn.qkv
    blip.visual_encoder.blocks.N.attn.proj   -> vision.encoder.layers.N.self_attn.projection
    blip.visual_encoder.blocks.N.mlp.fc1/fc2 -> vision.encoder.layers.N.mlp.fc1/fc2
    blip.visual_encoder.norm                 -> vision.post_layernorm
    blip.text_encoder.*                      -> text.*   (same names; the position_ids buffer is rebuilt)
    mlp.layers.{0,2,4,6,7}.*                 -> head Linear layers, in index order
blip.vision_proj / blip.text_proj (BLIP's contrastive heads) are not used by the score and are ignored. The ViT's
sizes are read from the checkpoint's shapes (heads = width / 64, as every BLIP ViT); the text sizes from
med_config.json. Unlike the reference loader (load_state_dict(strict=False)), a checkpoint missing any needed weight
is an error.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.rewards import model_files
from solrl_core.rewards.base import ModelReward, RewardModelSpec, host_scores, torch_dtype
from solrl_core.rewards.preprocess import resize_shortest_pil, unit_tensor

SCORE_MEAN = 0.16717362830052426
SCORE_STD = 1.0333394966054072
MAX_TOKENS = 35
IMAGE_MEAN = (0.48145466, 0.4578275, 0.40821073)
IMAGE_STD = (0.26862954, 0.26130258, 0.27577711)
VIT_HEAD_DIM = 64
CHECKPOINT = "ImageReward.pt"

_V = "blip.visual_encoder."
_T = "blip.text_encoder."
_VIT_RENAMES = [
    (r"^cls_token$", "embeddings.class_embedding"),
    (r"^pos_embed$", "embeddings.position_embedding"),
    (r"^patch_embed\.proj\.", "embeddings.patch_embedding."),
    (r"^blocks\.(\d+)\.norm1\.", r"encoder.layers.\1.layer_norm1."),
    (r"^blocks\.(\d+)\.norm2\.", r"encoder.layers.\1.layer_norm2."),
    (r"^blocks\.(\d+)\.attn\.qkv\.", r"encoder.layers.\1.self_attn.qkv."),
    (r"^blocks\.(\d+)\.attn\.proj\.", r"encoder.layers.\1.self_attn.projection."),
    (r"^blocks\.(\d+)\.mlp\.(fc[12])\.", r"encoder.layers.\1.mlp.\2."),
    (r"^norm\.", "post_layernorm."),
]


def map_official_state_dict(state: dict) -> tuple[dict, dict, dict[int, dict], list[str]]:
    """Split an official ImageReward state dict into (vision, text, head layers by index, ignored keys)."""
    vision, text, head, ignored = {}, {}, {}, []
    for key, value in state.items():
        if key.startswith(_V):
            name = key[len(_V):]
            for pattern, repl in _VIT_RENAMES:
                new, n = re.subn(pattern, repl, name)
                if n:
                    vision[new] = value
                    break
            else:
                ignored.append(key)
        elif key.startswith(_T):
            name = key[len(_T):]
            if name == "embeddings.position_ids":
                ignored.append(key)
            else:
                text[name] = value
        elif m := re.match(r"^mlp\.layers\.(\d+)\.(weight|bias)$", key):
            head.setdefault(int(m.group(1)), {})[m.group(2)] = value
        else:
            ignored.append(key)
    return vision, text, head, ignored


def vision_config_from_weights(vision: dict):
    """BlipVisionConfig of the ViT whose (mapped) weights are given."""
    from transformers import BlipVisionConfig

    try:
        width = vision["embeddings.class_embedding"].shape[-1]
        patch = vision["embeddings.patch_embedding.weight"].shape[-1]
        positions = vision["embeddings.position_embedding"].shape[1]
        mlp = vision["encoder.layers.0.mlp.fc1.weight"].shape[0]
    except KeyError as exc:
        raise SolrlError(f"imagereward: the checkpoint has no {exc.args[0]} weight (not an ImageReward state dict)") from None
    depth = 1 + max(int(k.split(".")[2]) for k in vision if k.startswith("encoder.layers."))
    grid = math.isqrt(positions - 1)
    return BlipVisionConfig(
        hidden_size=width, intermediate_size=mlp, num_hidden_layers=depth,
        num_attention_heads=max(1, width // VIT_HEAD_DIM), image_size=grid * patch, patch_size=patch,
        layer_norm_eps=1e-6, hidden_act="gelu", attention_dropout=0.0,
    )


def text_config_from_med(med: dict, encoder_width: int):
    from transformers import BlipTextConfig

    return BlipTextConfig(
        vocab_size=med["vocab_size"], hidden_size=med["hidden_size"], intermediate_size=med["intermediate_size"],
        num_hidden_layers=med["num_hidden_layers"], num_attention_heads=med["num_attention_heads"],
        max_position_embeddings=med["max_position_embeddings"], layer_norm_eps=med.get("layer_norm_eps", 1e-12),
        hidden_act=med.get("hidden_act", "gelu"), pad_token_id=med.get("pad_token_id", 0),
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        encoder_hidden_size=encoder_width, is_decoder=True,  # is_decoder: build the cross-attention layers
        bos_token_id=None, eos_token_id=None, sep_token_id=None,
    )


def load_bert_tokenizer(path: Path):
    """bert-base-uncased WordPiece tokenizer (a directory with vocab.txt, or the vocab.txt file) plus BLIP's tokens."""
    from transformers import BertTokenizer

    vocab = path / "vocab.txt" if path.is_dir() else path
    config = {}
    if path.is_dir() and (path / "tokenizer_config.json").is_file():
        config = json.loads((path / "tokenizer_config.json").read_text())
    tokenizer = BertTokenizer(str(vocab), do_lower_case=config.get("do_lower_case", True))
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    tokenizer.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
    return tokenizer


def _centre_crop(array: np.ndarray, size: int) -> np.ndarray:
    """torchvision's CenterCrop (top/left = round((dim - size) / 2)) for images at least `size` on each side."""
    h, w = array.shape[:2]
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return array[top : top + size, left : left + size]


class ImageReward(ModelReward):
    name = "imagereward"
    title = "ImageReward"
    summary = "ImageReward v1.0 (BLIP + MLP trained on human preferences), normalised with the official mean/std"
    needs = f"{CHECKPOINT}, med_config.json and a bert-base-uncased tokenizer (vocab.txt)"
    source = "hub THUDM/ImageReward (ImageReward.pt, med_config.json); tokenizer: google-bert/bert-base-uncased"
    spec_keys = frozenset({"path", "med_config", "tokenizer"})

    @classmethod
    def resolve(cls, spec: RewardModelSpec) -> dict[str, Path]:
        rel = f"ImageReward/{CHECKPOINT}"
        path, _ = model_files.candidate(cls.name, "path", spec.path, rel)
        if (path is None or not path.is_file()) and model_files.downloads_allowed(spec):
            path = model_files.hub_file(cls.name, "THUDM/ImageReward", CHECKPOINT)
        if path is None or not path.is_file():
            raise model_files.missing_error(cls.name, "path", "weights", path, f"download {CHECKPOINT} from THUDM/ImageReward", rel)
        med, _ = model_files.candidate(cls.name, "med_config", spec.med_config)
        med = med or path.parent / "med_config.json"
        if not med.is_file() and model_files.downloads_allowed(spec):
            med = model_files.hub_file(cls.name, "THUDM/ImageReward", "med_config.json")
        if not med.is_file():
            raise model_files.missing_error(cls.name, "med_config", "med_config.json", med, "download med_config.json from THUDM/ImageReward")
        tok, _ = model_files.candidate(cls.name, "tokenizer", spec.tokenizer, "bert-base-uncased")
        if tok is None or not _has_vocab(tok):
            sibling = path.parent / "bert-base-uncased"
            tok = sibling if _has_vocab(sibling) else tok
        if (tok is None or not _has_vocab(tok)) and model_files.downloads_allowed(spec):
            tok = model_files.hub_dir(cls.name, "google-bert/bert-base-uncased", ["vocab.txt", "tokenizer_config.json"])
        if tok is None or not _has_vocab(tok):
            raise model_files.missing_error(
                cls.name, "tokenizer", "bert-base-uncased tokenizer (vocab.txt)", tok,
                "download vocab.txt of google-bert/bert-base-uncased", "bert-base-uncased",
            )
        return {"path": path, "med_config": med, "tokenizer": tok}

    def __init__(self, files: dict[str, Path], spec: RewardModelSpec):
        super().__init__(files, spec)
        import torch
        from transformers import BlipTextModel, BlipVisionModel

        try:
            med = json.loads(files["med_config"].read_text())
        except (OSError, ValueError) as exc:
            raise SolrlError(f"imagereward: cannot read {files['med_config']} as JSON ({exc})") from None
        state = model_files.load_state_dict(self.name, files["path"])
        vision_sd, text_sd, head_sd, _ignored = map_official_state_dict(state)
        with model_files.quiet_logs():
            vision_cfg = vision_config_from_weights(vision_sd)
            text_cfg = text_config_from_med(med, vision_cfg.hidden_size)
            with model_files.skip_init():
                vision = BlipVisionModel(vision_cfg)
                text = BlipTextModel(text_cfg, add_pooling_layer=False)
        _load_strict(vision, vision_sd, "blip.visual_encoder", files["path"])
        _load_strict(text, text_sd, "blip.text_encoder", files["path"])
        if not head_sd or any(set(v) != {"weight", "bias"} for v in head_sd.values()):
            raise SolrlError(f"imagereward: {files['path']} has no complete MLP head (mlp.layers.N.weight/bias)")
        layers = []
        for index in sorted(head_sd):
            weight, bias = head_sd[index]["weight"], head_sd[index]["bias"]
            linear = torch.nn.Linear(weight.shape[1], weight.shape[0])
            linear.load_state_dict({"weight": weight, "bias": bias})
            layers.append(linear)
        if layers[0].in_features != text_cfg.hidden_size or layers[-1].out_features != 1:
            raise SolrlError(f"imagereward: the MLP head of {files['path']} does not fit med_config hidden_size")
        dtype_t = torch_dtype(self.dtype)
        self.vision = vision.to(self.torch_device, dtype=dtype_t).eval()
        self.text = text.to(self.torch_device, dtype=dtype_t).eval()
        self.head = torch.nn.Sequential(*layers).to(self.torch_device).eval()  # float32, as the reference's .float()
        self.image_size = vision_cfg.image_size
        self.input_size = self.image_size  # its transform begins with resize_shortest_pil
        self.tokenizer = load_bert_tokenizer(files["tokenizer"])
        if len(self.tokenizer) != text_cfg.vocab_size:
            raise SolrlError(
                f"imagereward: tokenizer {files['tokenizer']} has {len(self.tokenizer)} tokens with BLIP's [DEC]/[ENC], "
                f"med_config vocab_size is {text_cfg.vocab_size} (use bert-base-uncased's vocab.txt)"
            )

    def pixels(self, images: np.ndarray):
        """The reference transform: PIL bicubic resize of the shortest edge, centre crop, to [0, 1], normalise."""
        from torchvision.transforms import functional as F

        batch = [_centre_crop(resize_shortest_pil(img, self.image_size), self.image_size) for img in images]
        x = F.normalize(unit_tensor(np.stack(batch)), list(IMAGE_MEAN), list(IMAGE_STD))
        return x.to(self.torch_device, dtype=self.vision.dtype)

    def features(self, images: np.ndarray, prompts: list[str]):
        """The [CLS] feature of the image-grounded text encoder (B, hidden) in float32."""
        import torch

        image_embeds = self.vision(pixel_values=self.pixels(images)).last_hidden_state
        tokens = self.tokenizer(prompts, padding="max_length", truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
        image_mask = torch.ones(image_embeds.shape[:-1], dtype=torch.long, device=self.torch_device)
        out = self.text(
            input_ids=tokens["input_ids"].to(self.torch_device),
            attention_mask=tokens["attention_mask"].to(self.torch_device),
            encoder_hidden_states=image_embeds,
            encoder_attention_mask=image_mask,
        )
        return out.last_hidden_state[:, 0, :].float()

    def score_batch(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        raw = self.head(self.features(images, prompts)).squeeze(-1)
        return host_scores((raw - SCORE_MEAN) / SCORE_STD)


def _has_vocab(path: Path | None) -> bool:
    if path is None:
        return False
    return (path / "vocab.txt").is_file() if path.is_dir() else (path.is_file() and path.name.endswith(".txt"))


def _load_strict(module, state: dict, prefix: str, path: Path) -> None:
    try:
        result = module.load_state_dict(state, strict=False)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[-1].strip()
        raise SolrlError(f"imagereward: {path} does not fit its {prefix} ({first})") from None
    missing = [k for k in result.missing_keys if not k.endswith("position_ids")]
    if missing or result.unexpected_keys:
        example = (missing or result.unexpected_keys)[0]
        raise SolrlError(
            f"imagereward: {path}: {prefix} has {len(missing)} missing and {len(result.unexpected_keys)} unexpected "
            f"weights (e.g. '{prefix}.{example}'); is it ImageReward.pt with its med_config.json?"
        )
