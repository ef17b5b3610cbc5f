"""The embedded text-to-image model: a small pixel-space SD3 transformer, a small CLIP text encoder, a word tokenizer.

Everything is built from configs in code (no hub). On disk it is a standard directory:
    <dir>/transformer/    diffusers SD3Transformer2DModel (safetensors)
    <dir>/text_encoder/   transformers CLIPTextModel (safetensors; the video model's with its projection)
    <dir>/tokenizer/      transformers PreTrainedTokenizerFast (tokenizer.json)
    <dir>/solrl_embedded.json   resolution, format version, pretraining summary
The "latent" is the image itself: 3 x R x R pixels scaled to [-1, 1]. With patch size 4 a 32x32 image is 64 tokens.
The video model (solrl_core/models/embedded/video_model.py) is the same directory with a video transformer and the
frames in the metadata.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import diffusers
import numpy as np
import torch
import transformers
from diffusers import SD3Transformer2DModel
from transformers import CLIPTextConfig, CLIPTextModel, PreTrainedTokenizerFast

from solrl_core.worlds.shapes import all_prompts
from solrl_core.errors import SolrlError

FORMAT_VERSION = 1
METADATA_FILE = "solrl_embedded.json"
PATCH_SIZE = 4
TEXT_LENGTH = 8  # tokens per prompt after padding: <bos> + up to 6 words (the grammar's longest) + <eos>
TEXT_WIDTH = 64
WIDTH = 128  # transformer width = heads x head dim
SPECIAL_TOKENS = ["<pad>", "<unk>", "<bos>", "<eos>"]  # ids 0..3; eos must not be 2 (transformers' legacy CLIP pooling)
REQUIRED_FILES = (
    METADATA_FILE,
    "transformer/config.json",
    "transformer/diffusion_pytorch_model.safetensors",
    "text_encoder/config.json",
    "text_encoder/model.safetensors",
    "tokenizer/tokenizer.json",
)


def build_tokenizer(prompts: Sequence[str] | None = None) -> PreTrainedTokenizerFast:
    """A WordLevel tokenizer trained on `prompts` (default: the image grammar's); encodes '<bos> words <eos>' padded to
    TEXT_LENGTH."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(special_tokens=SPECIAL_TOKENS, show_progress=False)
    tok.train_from_iterator(all_prompts() if prompts is None else list(prompts), trainer)
    bos, eos = tok.token_to_id("<bos>"), tok.token_to_id("<eos>")
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", special_tokens=[("<bos>", bos), ("<eos>", eos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<bos>",
        eos_token="<eos>",
        model_max_length=TEXT_LENGTH,
        padding_side="right",
    )


def text_encoder_config(tokenizer: PreTrainedTokenizerFast) -> CLIPTextConfig:
    return CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=TEXT_WIDTH,
        intermediate_size=4 * TEXT_WIDTH,
        projection_dim=TEXT_WIDTH,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=16,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def transformer_config(resolution: int = 32) -> dict:
    """SD3Transformer2DModel kwargs: every Linear width is a multiple of 16 (NVFP4 blocks)."""
    if resolution % PATCH_SIZE:
        raise SolrlError(f"resolution must be a multiple of {PATCH_SIZE}, got {resolution}")
    return dict(
        sample_size=resolution,
        patch_size=PATCH_SIZE,
        in_channels=3,
        out_channels=3,
        num_layers=4,
        attention_head_dim=32,
        num_attention_heads=WIDTH // 32,
        joint_attention_dim=TEXT_WIDTH,
        caption_projection_dim=WIDTH,
        pooled_projection_dim=TEXT_WIDTH,
        pos_embed_max_size=resolution // PATCH_SIZE,
        qk_norm="rms_norm",
    )


@dataclass
class EmbeddedModel:
    transformer: SD3Transformer2DModel
    text_encoder: CLIPTextModel  # CLIPTextModelWithProjection for the video model
    tokenizer: PreTrainedTokenizerFast
    resolution: int = 32
    metadata: dict = field(default_factory=dict)
    frames: int | None = None  # frames of a video model's samples; None: an image model

    def tokenize(self, prompts) -> torch.Tensor:
        """Token ids (B, L), L = the tokenizer's fixed length (TEXT_LENGTH when built here)."""
        length = self.tokenizer.model_max_length
        return self.tokenizer(
            list(prompts), padding="max_length", max_length=length, truncation=True, return_tensors="pt"
        ).input_ids.to(self.text_encoder.device)

    def encode(self, prompts) -> dict[str, torch.Tensor]:
        """Conditioning with grad (for joint pretraining): last hidden state and the pooled <eos> state."""
        out = self.text_encoder(input_ids=self.tokenize(prompts))
        pooled = out.text_embeds if hasattr(out, "text_embeds") else out.pooler_output  # projected (the video model)
        return {"encoder_hidden_states": out.last_hidden_state, "pooled_projections": pooled}

    def save(self, out_dir: str | Path, dtype: torch.dtype = torch.float16, metadata: dict | None = None) -> Path:
        """Write the standard directory; weights stored in `dtype` (`load_model` reads them in the dtype it is
        given, fp32 by default)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, module in (("transformer", self.transformer), ("text_encoder", self.text_encoder)):
            copy.deepcopy(module).to(dtype).save_pretrained(out / name, safe_serialization=True)
        self.tokenizer.save_pretrained(out / "tokenizer")
        meta = {"format": "solrl-embedded", "version": FORMAT_VERSION, "resolution": self.resolution,
                **({"frames": self.frames} if self.frames else {})}
        meta.update(self.metadata)
        meta.update(metadata or {})
        (out / METADATA_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        return out


def build_model(resolution: int = 32, seed: int = 0) -> EmbeddedModel:
    """A randomly initialised model (initialisation reproducible from `seed`)."""
    tokenizer = build_tokenizer()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        text_encoder = CLIPTextModel(text_encoder_config(tokenizer))
        transformer = SD3Transformer2DModel(**transformer_config(resolution))
    return EmbeddedModel(transformer.eval(), text_encoder.eval(), tokenizer, resolution)


def check_model_dir(path: str | Path) -> dict:
    """The metadata of a saved model directory; SolrlError naming the first missing file or a wrong version (nothing
    is loaded)."""
    root = Path(path)
    for rel in REQUIRED_FILES:
        if not (root / rel).is_file():
            raise SolrlError(
                f"embedded model: missing {root / rel}; run `solrl pretrain --out DIR` or fix model.path"
            )
    meta = json.loads((root / METADATA_FILE).read_text())
    if meta.get("version") != FORMAT_VERSION:
        raise SolrlError(
            f"embedded model: {root / METADATA_FILE} has version {meta.get('version')}, expected {FORMAT_VERSION}"
        )
    return meta


def load_model(path: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32) -> EmbeddedModel:
    """Load a saved directory, transformer and text encoder in `dtype`; SolrlError naming the first missing file."""
    root = Path(path)
    meta = check_model_dir(root)
    transformer_class = json.loads((root / "transformer" / "config.json").read_text())["_class_name"]
    transformer = getattr(diffusers, transformer_class).from_pretrained(root / "transformer", torch_dtype=dtype)
    text_encoder_class = json.loads((root / "text_encoder" / "config.json").read_text())["architectures"][0]
    text_encoder = getattr(transformers, text_encoder_class).from_pretrained(root / "text_encoder", dtype=dtype)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(root / "tokenizer")
    return EmbeddedModel(transformer.to(device).eval(), text_encoder.to(device).eval(), tokenizer,
                         int(meta["resolution"]), meta, meta.get("frames"))


def predict_velocity(transformer: torch.nn.Module, x_t: torch.Tensor, sigma: torch.Tensor, cond: dict) -> torch.Tensor:
    """The transformer's output at noise level sigma in [0, 1] (timestep = 1000 sigma, in fp32): the velocity
    eps - x0. Image and conditioning enter in the transformer's dtype, the velocity comes back in x_t's dtype (the
    sampler integrates fp32 latents over a bf16 model); all casts are no-ops for an fp32 model."""
    dtype = transformer.dtype
    timestep = (sigma.to(torch.float32) * 1000.0).expand(x_t.shape[0])
    out = transformer(
        hidden_states=x_t.to(dtype),
        encoder_hidden_states=cond["encoder_hidden_states"].to(dtype),
        pooled_projections=cond["pooled_projections"].to(dtype),
        timestep=timestep,
        return_dict=False,
    )[0]
    return out.to(x_t.dtype)


def images_to_latents(images: np.ndarray) -> torch.Tensor:
    """uint8 (B, H, W, 3) -> float (B, 3, H, W) in [-1, 1]."""
    return torch.from_numpy(np.asarray(images)).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def latents_to_images(latents: torch.Tensor) -> np.ndarray:
    """float (B, 3, H, W) in [-1, 1] -> uint8 (B, H, W, 3) (clamped, rounded)."""
    pixels = ((latents.detach().float().clamp(-1, 1) + 1) * 127.5).round()
    return pixels.permute(0, 2, 3, 1).to(torch.uint8).cpu().numpy()
