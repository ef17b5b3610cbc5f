"""A tiny random-weight Qwen-Image diffusers directory: the Qwen-Image architecture with toy widths, written offline.

`make_tiny_qwenimage(out_dir)` saves a `QwenImagePipeline` (model_index.json, transformer/, vae/, text_encoder/,
tokenizer/, scheduler/) that `model.path` can point at (`model.kind: qwenimage`).

| part | real Qwen-Image | here |
|---|---|---|
| transformer | QwenImageTransformer2DModel, 60 MMDiT blocks, 24 heads x 128, rope axes 16/56/56, in 64 (16 latent channels packed 2x2), text 3584 | 1 block, 2 heads x 16, rope axes 4/6/6, in 64, text 32; every Linear a multiple of 16 wide |
| vae | AutoencoderKLQwenImage (causal 3D, f8, 16 latent channels, per-channel latents_mean / latents_std) | the same class, base width 8, one res block per stage, the release's latents_mean / latents_std (the class defaults) |
| text_encoder | Qwen2_5_VLForConditionalGeneration (Qwen2.5-VL-7B, 28 layers, width 3584) | the same class, 2 text layers of width 32, a 1-block vision tower of width 32 (never run: prompts are text only) |
| tokenizer | Qwen2Tokenizer (byte-level BPE, 151k tokens, <|im_start|> / <|im_end|> chat tokens) | Qwen2Tokenizer over a byte-level BPE trained here on the pipeline's prompt template and the tiny corpus |
| scheduler | FlowMatchEulerDiscreteScheduler, exponential dynamic shift (base 0.5, max 0.9, seq len 256..8192), shift_terminal 0.02 | the same config |

Weights come from fixed seeds, so two calls write identical files.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from solrl_core.models.backbones.diffusers_pipeline import quiet_hf
from solrl_core.models.backbones.tiny import text

SEED = 0
TEXT_HIDDEN = 32  # joint_attention_dim = the text encoder's hidden size
LATENT_CHANNELS = 16
BPE_MERGES = 384  # merges learned on top of the 256 byte tokens
CHAT_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # Qwen2's special tokens, pad = <|endoftext|>
# the vision tower's special tokens, which Qwen2_5_VL's config points at (never produced by text prompts)
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")

SCHEDULER_CONFIG = dict(  # Qwen/Qwen-Image's scheduler/scheduler_config.json
    num_train_timesteps=1000,
    shift=1.0,
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=0.9,
    base_image_seq_len=256,
    max_image_seq_len=8192,
    shift_terminal=0.02,
    time_shift_type="exponential",
)


def qwen_tokenizer():
    """A Qwen2Tokenizer (byte-level pre-tokenizer and decoder, as Qwen2's) over a BPE trained on the pipeline's
    prompt template and `text.TINY_CORPUS`; every byte is a token, so any text tokenizes without unknowns."""
    from diffusers import QwenImagePipeline
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    trainer = trainers.BpeTrainer(
        vocab_size=len(alphabet) + BPE_MERGES, initial_alphabet=alphabet, special_tokens=[], show_progress=False
    )
    template = QwenImagePipeline(None, None, None, None, None).prompt_template_encode  # set in its __init__
    trainer_tok.train_from_iterator([*_template_texts(template), *text.TINY_CORPUS], trainer)
    model = json.loads(trainer_tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tokens = list(dict.fromkeys([*alphabet, *("".join(pair) for pair in merges)]))
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=None,
                               eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": [*CHAT_TOKENS[1:], *VISION_TOKENS]})
    return tokenizer


def _template_texts(template: str) -> list[str]:
    """The fixed text around every prompt (QwenImagePipeline's prompt template), split at the chat tokens."""
    parts = template.replace("{}", "\n")
    for token in CHAT_TOKENS:
        parts = parts.replace(token, "\n")
    return [p for p in parts.split("\n") if p.strip()]



def tiny_text_encoder(tokenizer, seed: int = SEED + 2):
    """Qwen2_5_VLForConditionalGeneration with a 2-layer text model (width 32, 2 heads x 16, 1 KV head, M-RoPE
    sections 2/3/3 of the 8 rotary frequencies) and a 1-block vision tower of width 32."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (*CHAT_TOKENS, *VISION_TOKENS)}
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=TEXT_HIDDEN,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=2048,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]},
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
        ),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=TEXT_HIDDEN,
                           fullatt_block_indexes=[0]),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen2_5_VLForConditionalGeneration(config).eval()


def tiny_transformer(seed: int = SEED):
    from diffusers import QwenImageTransformer2DModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return QwenImageTransformer2DModel(
            patch_size=2,
            in_channels=4 * LATENT_CHANNELS,  # 2x2 packed latent patches
            out_channels=LATENT_CHANNELS,
            num_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=TEXT_HIDDEN,
            axes_dims_rope=(4, 6, 6),
        ).eval()


def tiny_vae(seed: int = SEED + 1):
    """AutoencoderKLQwenImage with the release's stage layout (3 temporal-free downsamplings in space: f8) and
    latent normalisation, base width 8, one res block per stage."""
    from diffusers import AutoencoderKLQwenImage

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoencoderKLQwenImage(base_dim=8, z_dim=LATENT_CHANNELS, num_res_blocks=1).eval()


def make_tiny_qwenimage(out_dir: str | Path, edit: bool = False) -> Path:
    """Write the tiny Qwen-Image diffusers directory into `out_dir` and return it; with `edit`, Qwen-Image-Edit's
    (`make_tiny_qwenimage_edit`)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, QwenImageEditPipeline, QwenImagePipeline

    out = Path(out_dir)
    tokenizer = qwen_tokenizer()
    parts = dict(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG), vae=tiny_vae(),
                 text_encoder=tiny_text_encoder(tokenizer), tokenizer=tokenizer, transformer=tiny_transformer())
    pipe = QwenImageEditPipeline(processor=tiny_processor(tokenizer), **parts) if edit else QwenImagePipeline(**parts)
    with quiet_hf():
        pipe.save_pretrained(out, safe_serialization=True)
    return out


def tiny_processor(tokenizer):
    """Qwen2VLProcessor: Qwen2.5-VL's image processor (14 px patches, 2 x 2 merged, 2 frames a temporal patch) with
    a pixel budget for tiny sources (56 x 56 up to 112 x 112), and the tiny tokenizer."""
    from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

    budget = dict(patch_size=14, temporal_patch_size=2, merge_size=2)
    images = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112, **budget)
    return Qwen2VLProcessor(image_processor=images, tokenizer=tokenizer, video_processor=Qwen2VLVideoProcessor(**budget))


def make_tiny_qwenimage_edit(out_dir: str | Path) -> Path:
    """The tiny Qwen-Image-Edit: Qwen-Image's tiny components (the vision tower now used) and a processor."""
    return make_tiny_qwenimage(out_dir, edit=True)
