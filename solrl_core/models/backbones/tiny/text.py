"""Offline tiny text-encoder parts shared by the tiny FLUX / SD3.5 (and other) diffusers directories.

Nothing here is downloaded: the tokenizers are trained in code with the `tokenizers` library on a small fixed corpus
(`TINY_CORPUS`), the encoders are transformers models built from small configs. Both keep the real classes and
conventions, so the pipelines' own prompt encoding runs on them unchanged:

| part | real | here |
|---|---|---|
| CLIP tokenizer | CLIPTokenizer, byte-level BPE, 49408 tokens, `</w>` word ends, 77 tokens | the same class and pre-tokenization over a BPE of 750 tokens (every byte, alone and as a word end); `<|startoftext|>` and `<|endoftext|>` last, as in CLIP |
| T5 tokenizer | T5TokenizerFast, 32k SentencePiece unigram, `</s>` appended | the same class (Metaspace pre-tokenizer, `</s>` appended) over a unigram vocabulary trained here |
| CLIP-L / CLIP-G | CLIPTextModel(WithProjection), width 768 / 1280 | the same classes, 2 layers, width and projection given by the caller |
| T5 | T5EncoderModel (v1.1 XXL: gated-GELU, width 4096) | T5EncoderModel, gated-GELU, 2 layers, width given by the caller |

Stable interface (also used by other tiny makers): `TINY_CORPUS`, `clip_tokenizer(pad_token)`, `t5_tokenizer()`,
`clip_text_encoder(tokenizer, hidden_size, projection_dim=None, seed=0)`, `t5_encoder(tokenizer, d_model, seed=0)`.
Every builder is deterministic: the same arguments give the same vocabulary and the same weights.
"""

from __future__ import annotations

import json
import string

import torch

CLIP_BOS, CLIP_EOS = "<|startoftext|>", "<|endoftext|>"
CLIP_MAX_LENGTH = 77  # CLIP's context length (the pipelines pad CLIP prompts to tokenizer.model_max_length)
CLIP_MERGES = 256  # BPE merges learned on top of the byte alphabet
T5_VOCAB = 512  # upper bound: the trainer keeps fewer pieces on this small corpus
T5_MAX_LENGTH = 512  # FLUX.1's longest T5 prompt

_GENERAL_PROMPTS = (
    "a photo of a cat sitting on a wooden table",
    "an astronaut riding a horse on the moon, digital art",
    "a watercolor painting of a lighthouse at sunset",
    "a portrait of an old man with a beard, studio lighting",
    "a city street at night in the rain, neon lights",
    "a bowl of fruit: apples, oranges and bananas",
    "two dogs playing in the snow near a red house",
    "a futuristic car on a highway, 4k, highly detailed",
    "a cozy living room with a fireplace and a green sofa",
    "the text 'hello world' written on a blackboard",
)


def _corpus() -> list[str]:
    from solrl_core.worlds import shapes

    return [*shapes.all_prompts(), *_GENERAL_PROMPTS]


TINY_CORPUS: tuple[str, ...] = tuple(_corpus())
"""The fixed text the tiny tokenizers are trained on: the builtin shape prompts and a few general prompts."""


def clip_tokenizer(pad_token: str = CLIP_EOS):
    """A transformers CLIPTokenizer (CLIP's normalizer, pre-tokenizer and `</w>` word ends) over a small byte-level
    BPE trained on `TINY_CORPUS`. Every byte is in the vocabulary on its own and as a word end, so any text
    tokenizes without unknown tokens; `<|startoftext|>` / `<|endoftext|>` take the last two ids, as in CLIP.
    `pad_token`: CLIP-L pads with `<|endoftext|>`, SD3's CLIP-G tokenizer (tokenizer_2) with "!"."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import CLIPTokenizer

    template = CLIPTokenizer()  # the real normalizer and pre-tokenizer, to train on the same word pieces
    trainer_tok = Tokenizer(models.BPE(unk_token=CLIP_EOS, end_of_word_suffix="</w>", continuing_subword_prefix=""))
    trainer_tok.normalizer = template.backend_tokenizer.normalizer
    trainer_tok.pre_tokenizer = template.backend_tokenizer.pre_tokenizer
    byte_tokens = sorted(pre_tokenizers.ByteLevel.alphabet())
    word_ends = [b + "</w>" for b in byte_tokens]
    trainer = trainers.BpeTrainer(
        vocab_size=2 + 2 * len(byte_tokens) + CLIP_MERGES,
        initial_alphabet=byte_tokens,
        # the word-end tokens are fixed up front: otherwise the trainer numbers them in hash order, which breaks
        # ties between equally frequent merges differently from run to run
        special_tokens=[CLIP_BOS, CLIP_EOS, *word_ends],
        end_of_word_suffix="</w>",
        continuing_subword_prefix="",
        show_progress=False,
    )
    trainer_tok.train_from_iterator(TINY_CORPUS, trainer)
    model = json.loads(trainer_tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    merged = ["".join(pair) for pair in merges]
    # CLIP's id order: bytes, bytes as word ends, merged tokens in merge order, then the two special tokens
    tokens = list(dict.fromkeys([*byte_tokens, *word_ends, *merged, CLIP_BOS, CLIP_EOS]))
    vocab = {token: index for index, token in enumerate(tokens)}
    return CLIPTokenizer(vocab=vocab, merges=merges, pad_token=pad_token, model_max_length=CLIP_MAX_LENGTH)


def t5_tokenizer(model_max_length: int = T5_MAX_LENGTH):
    """A transformers T5TokenizerFast (Metaspace pre-tokenizer, `</s>` appended, <pad>=0, </s>=1, <unk>=2) over a
    unigram vocabulary trained on `TINY_CORPUS`, plus every printable ASCII character as a fallback piece; no
    sentinel tokens."""
    from tokenizers import Tokenizer, models, trainers
    from transformers import T5TokenizerFast

    specials = ["<pad>", "</s>", "<unk>"]
    template = T5TokenizerFast(extra_ids=0)
    trainer_tok = Tokenizer(models.Unigram())
    trainer_tok.pre_tokenizer = template.backend_tokenizer.pre_tokenizer
    trainer = trainers.UnigramTrainer(
        vocab_size=T5_VOCAB, special_tokens=specials, unk_token="<unk>", show_progress=False
    )
    trainer_tok.train_from_iterator(TINY_CORPUS, trainer)
    trained = json.loads(trainer_tok.to_str())["model"]["vocab"]
    # The trainer is not deterministic in its last digits, in the order of tied pieces and in the scores it gives
    # single characters (hash order). Keep its multi-character pieces with rounded scores, in a fixed order, and
    # give every single character one shared fallback score below them.
    pieces = sorted(
        ((piece, round(float(score), 4)) for piece, score in trained if len(piece) > 1 and piece not in specials),
        key=lambda ps: (-ps[1], ps[0]),
    )
    fallback = min(score for _, score in pieces) - 1.0
    chars = sorted({*string.printable.strip(), "\u2581"} | {c for text in TINY_CORPUS for c in text if not c.isspace()})
    vocab = [(s, 0.0) for s in specials] + pieces + [(c, fallback) for c in chars]
    return T5TokenizerFast(vocab=vocab, extra_ids=0, model_max_length=model_max_length)


def clip_text_encoder(tokenizer, hidden_size: int, projection_dim: int | None = None, seed: int = 0):
    """A 2-layer CLIP text encoder for `tokenizer`, heads of 16: CLIPTextModel (FLUX's CLIP-L, pooled output of
    width `hidden_size`) when `projection_dim` is None, else CLIPTextModelWithProjection (SD3's CLIP-L / CLIP-G,
    text_embeds of width `projection_dim`)."""
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    config = CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        projection_dim=projection_dim or hidden_size,
        num_hidden_layers=2,
        num_attention_heads=hidden_size // 16,
        max_position_embeddings=tokenizer.model_max_length,
        hidden_act="quick_gelu",
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    cls = CLIPTextModel if projection_dim is None else CLIPTextModelWithProjection
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(config).eval()


def t5_encoder(tokenizer, d_model: int, seed: int = 0):
    """A 2-layer T5EncoderModel for `tokenizer` with T5 v1.1's gated-GELU feed-forward, heads of 16."""
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=d_model,
        d_kv=16,
        num_heads=d_model // 16,
        d_ff=2 * d_model,
        num_layers=2,
        feed_forward_proj="gated-gelu",
        dropout_rate=0.0,
        is_encoder_decoder=False,
        use_cache=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return T5EncoderModel(config).eval()
