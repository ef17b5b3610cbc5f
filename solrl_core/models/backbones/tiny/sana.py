"""A tiny random-weight SANA diffusers directory: the SANA 1600M architecture with toy widths, written offline.

`make_tiny_sana(out_dir)` saves a `SanaPipeline` (model_index.json, transformer/, vae/, text_encoder/, tokenizer/,
scheduler/) that `model.path` can point at. Kept from the real SANA 1600M 1024px, and shrunk:

- transformer: SanaTransformer2DModel with the same layer kinds (linear self-attention, cross-attention, GLUMBConv
  feed-forward, AdaLN-single); 2 blocks of width 32 instead of 20 of 2240, caption width 32 instead of 2304; every
  Linear a multiple of 16 wide.
- vae: AutoencoderDC with the f32c32 layout (3 ResBlock and 3 EfficientViT stages, spatial compression 32, 32 latent
  channels, scaling factor 0.41407), 8–32 channels wide.
- text encoder: Gemma2Model with 2 layers (one sliding-window, one global, as Gemma 2 alternates), hidden 32.
- tokenizer: GemmaTokenizerFast (Gemma's normalizer, BPE with the 256 byte-fallback tokens, <bos> prepended) over a
  vocabulary trained here with `tokenizers` on the pipeline's instruction text and the builtin shape prompts.
- scheduler: the real one, DPMSolverMultistepScheduler on flow sigmas with flow_shift 3.0.

Weights come from a fixed seed, so two calls write identical files. Takes under a second once diffusers and
transformers are imported; writes ~1.2 MB.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from solrl_core.models.backbones.diffusers_pipeline import quiet_hf

SEED = 0
TEXT_HIDDEN = 32
LATENT_CHANNELS = 32  # the real DC-AE f32c32 latent channels
VAE_SCALING_FACTOR = 0.41407  # the real DC-AE f32c32 scaling factor
SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")  # Gemma's ids 0..4
BYTE_TOKENS = tuple(f"<0x{i:02X}>" for i in range(256))
TOKENIZER_VOCAB = 1024


def tiny_gemma_tokenizer():
    """A GemmaTokenizerFast (Gemma's normalizer, BPE with byte fallback, <bos> prepended) over a small vocabulary
    trained in code: words of the pipeline's instruction text and the builtin shape prompts become single tokens,
    anything else falls back to bytes."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import GemmaTokenizerFast

    from solrl_core.models.backbones.sana import default_instruction
    from solrl_core.worlds import shapes

    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    trainer_tok.normalizer = normalizers.Replace(" ", "▁")  # as Gemma's
    # training only: merges stay within words (GemmaTokenizerFast applies them to the whole normalized string)
    trainer_tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_previous")
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB, special_tokens=[*SPECIAL_TOKENS, *BYTE_TOKENS], show_progress=False
    )
    corpus = [*default_instruction(), *shapes.all_prompts(), "a photo of a cat", "a dog on a sunny beach"]
    trainer_tok.train_from_iterator(corpus, trainer)
    model = json.loads(trainer_tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    return GemmaTokenizerFast(vocab=model["vocab"], merges=merges, add_bos_token=True, add_eos_token=False)


def tiny_text_encoder(vocab_size: int):
    from transformers import Gemma2Config, Gemma2Model

    config = Gemma2Config(
        vocab_size=vocab_size,
        hidden_size=TEXT_HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        query_pre_attn_scalar=16,
        max_position_embeddings=1024,
        sliding_window=128,
    )
    return Gemma2Model(config).eval()


def tiny_transformer():
    from diffusers import SanaTransformer2DModel

    return SanaTransformer2DModel(
        in_channels=LATENT_CHANNELS,
        out_channels=LATENT_CHANNELS,
        num_attention_heads=2,
        attention_head_dim=16,
        num_layers=2,
        num_cross_attention_heads=2,
        cross_attention_head_dim=16,
        cross_attention_dim=32,
        caption_channels=TEXT_HIDDEN,
        mlp_ratio=2.5,
        sample_size=32,
        patch_size=1,
    ).eval()


def tiny_vae():
    """AutoencoderDC with the real f32c32 layout (3 ResBlock stages, 3 EfficientViT stages, spatial compression
    2**5 = 32) and toy widths."""
    from diffusers import AutoencoderDC

    blocks = ("ResBlock",) * 3 + ("EfficientViTBlock",) * 3
    return AutoencoderDC(
        in_channels=3,
        latent_channels=LATENT_CHANNELS,
        attention_head_dim=8,
        encoder_block_types=blocks,
        decoder_block_types=blocks,
        encoder_block_out_channels=(8, 8, 16, 16, 32, 32),
        decoder_block_out_channels=(8, 8, 16, 16, 32, 32),
        encoder_layers_per_block=(1,) * 6,
        decoder_layers_per_block=(1,) * 6,
        encoder_qkv_multiscales=((), (), (), (5,), (5,), (5,)),
        decoder_qkv_multiscales=((), (), (), (5,), (5,), (5,)),
        upsample_block_type="interpolate",
        downsample_block_type="Conv",
        decoder_norm_types=("batch_norm",) * 3 + ("rms_norm",) * 3,
        decoder_act_fns=("relu",) * 3 + ("silu",) * 3,
        scaling_factor=VAE_SCALING_FACTOR,
    ).eval()


def sana_scheduler():
    """The scheduler SANA 1600M 1024px ships with in diffusers: multistep DPM-Solver++ on flow sigmas, shift 3."""
    from diffusers import DPMSolverMultistepScheduler

    return DPMSolverMultistepScheduler(flow_shift=3.0, use_flow_sigmas=True, prediction_type="flow_prediction")


def make_tiny_sana(out_dir: str | Path) -> Path:
    """Write the tiny SANA diffusers directory into `out_dir` and return it."""
    from diffusers import SanaPipeline

    out = Path(out_dir)
    tokenizer = tiny_gemma_tokenizer()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        pipe = SanaPipeline(
            tokenizer=tokenizer,
            text_encoder=tiny_text_encoder(len(tokenizer)),
            vae=tiny_vae(),
            transformer=tiny_transformer(),
            scheduler=sana_scheduler(),
        )
    with quiet_hf():
        pipe.save_pretrained(out, safe_serialization=True)
    return out
