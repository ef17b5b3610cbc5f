"""Parameter counts of the full-size backbones and a rough estimate of the GPU memory of one training process.

Everything is built on the meta device (no weights, no memory): the diffusers transformers from their configs in
``solrl_core/models/model_configs`` (``solrl_core.lab.quant_coverage.build_meta_model``), the VAEs from the planner's public VAE
configs (``solrl_core.planner.flops.VAE_DECODERS``), and the text encoders and the reward model from the published
config values below (their parameter counts match the released checkpoints).

The memory estimate is rough. Per GPU, during the update, in GiB:

* ``weights``       — the transformer in bf16, once: the policy's LoRA layers wrap a copy of the module tree whose
                      weights are the cached base W0 (``stages.transformer_copies.weight_sharing_transformer``);
* ``lora``          — the official LoRA targets at the model's rank (``official_rank``: 32 but where the model's
                      preset part sets its own) in fp32: θ with its gradient and AdamW's two moments,
                      θ_old and the EMA of θ (6 × 4 bytes per LoRA parameter);
* ``text_encoders`` — bf16, resident (``model.release_text_encoders`` frees them once every prompt is cached);
* ``vae``           — the whole autoencoder in bf16;
* ``reward``        — the largest training reward model in bf16 (CLIP ViT-H/14: PickScore, HPSv2.1);
* ``activations``   — with gradient checkpointing per transformer block, for ``micro_batch`` (sample, time) pairs:
                      the block inputs kept for the backward, what the layers outside the blocks save, and the
                      largest block's saved tensors while it is recomputed. Measured on the meta device with
                      ``torch.autograd.graph.saved_tensors_hooks`` on one pair at the official resolution (bf16 base,
                      frozen; the LoRA on the official targets in fp32 as the policy keeps it, so each targeted layer
                      also saves its input cast to fp32, as peft does); attention counts as FlashAttention does
                      (query, key, value, output and the per-row log-sum-exp, no score matrix).
``memory_estimate``'s keywords price another run of the same model (LoRA rank and targets, no gradient
checkpointing, another resolution or text length, float32 weights, another explore copy): what
``solrl_core.planner.fits`` checks a run config against its GPUs.

The other stages (``MemoryEstimate.stage_parts``), each with the text encoders, VAE and reward model:

* explore     — W0 and what the explore copy adds to it (``solrl_core.planner.explore_copy``: the copy shares W0;
                the layers the explore precision replaces, as large as the source layer when emulated or through
                Transformer Engine, 1 byte per weight with ``torch._scaled_mm`` FP8; the merged W0 + θ_old of every
                LoRA-targeted layer unless ``quant.lora_branch``, where θ_old's fp32 LoRA rides beside the base);
* regenerate  — W0 with θ_old as an unmerged LoRA branch (``stages.old_policy``), θ and θ_old in fp32; so does
                the audit;
* evaluation  — W0 + the merged EMA policy's targeted layers (``evaluate.policy_transformer``: a new tensor per
                targeted layer, the rest shared), with θ, θ_old, the EMA and θ's copy (fp32) alive while it merges.

Under full fine-tuning (``adapter="full"``, ``train.adapter: full``) the update holds, instead of ``lora``:

* ``full_state``    — every transformer parameter in fp32 as θ, its gradient, AdamW's two moments, θ_old and the EMA
                      (``FULL_BYTES_PER_PARAM``), sharded over the update's ``processes`` by FSDP2
                      (``solrl_core.rl.full_policy``);
* ``gathered``      — with more than one process, the largest block all-gathered for its forward (twice: the next one
                      is prefetched) in the model's dtype, and its fp32 gradient before the reduce-scatter;

and W0 stays whole on every rank (the objectives' reference and the sampling stages' base). The sampling stages
hold a whole copy of θ_old (explore, regenerate, audit) or the EMA (evaluation) at the model's dtype beside W0
(``policy``), read one block at a time from the checkpoint (``stages.checkpoints.full_weights``); the explore copy's
quantized layers are made from that copy and replace its layers as they are made, so the peak is the copy's.

The update also holds the iteration's samples on every rank (``samples``: what ``memory_estimate`` is given, from
the run config; a Flow-GRPO trajectory of 1,152 FLUX.1 samples at 512 px is about 3 GiB).

The sampling stages also hold their batch's activations when the caller says the batches (``sampling_batches``:
the fit check does, from the run config): per sample, its latent and conditioning and the most a no-grad forward
holds at once (``sampling_bytes``, measured on the meta device); FLUX.1 at 512 px: ~0.11 GiB a sample.

A model of several experts (Wan2.2-T2V-A14B: two transformers of one config, one per step;
``solrl_core/models/experts.py``) holds every expert's weights in every stage (``weights``, and the explore copy's
quantized layers, of each expert), the LoRA state of its trained experts alone (``lora``, the merged targeted layers;
``trained_experts``), and one expert's activations (a forward runs one expert per sample).

Left out: CUDA context and allocator fragmentation (add ~2–4 GiB), the low-precision layers' own temporaries (an
FP8 layer's input codes, chunked: ``quant.fp8.CHUNK_ELEMENTS``), text embeddings of the iteration's samples, and
the no-grad forwards of v_old and v_ref (their activations are freed as they go).

    python -m solrl_core.planner.memory             # the table, as in docs/backbones.md
    python -m solrl_core.planner.memory --full 8    # full fine-tuning over 8 update ranks (docs/planner.md)
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Callable

import torch
from torch import nn

from solrl_core.models.backbones.diffusers_pipeline import DTYPES  # model.dtype -> torch dtype
from solrl_core.models.backbones.registry import backbone_specs
from solrl_core.models.backbones.spec import BackboneSpec
from solrl_core.models.model_configs import config_dir
from solrl_core.planner.explore_copy import ExploreCopy, explore_copy_bytes, merged_bytes, targeted_linears
from solrl_core.planner.flops import VAE_DECODERS, example_inputs, get_model
from solrl_core.models.meta_models import build_meta_model
from solrl_core.models.blocks import transformer_blocks

# the backbones with a full-size model (their specs: official LoRA targets, micro-batch, text encoders, title)
SPECS: dict[str, BackboneSpec] = {s.key: s for s in backbone_specs() if s.config_file}
MODELS = tuple(SPECS)
GIB = 2**30
BF16 = 2
LORA_BYTES_PER_PARAM = 6 * 4  # fp32: θ, its gradient, AdamW m and v, θ_old, EMA
FULL_BYTES_PER_PARAM = 6 * 4  # the same six fp32 values for every weight of the transformer (sharded by FSDP2)
ADAPTER_BYTES_PER_PARAM = 2 * 4  # fp32: θ and θ_old, the adapters a sampling process attaches (no training state)
# fp32: θ, θ_old, the EMA and the copy of θ that `EmaWeights.swapped_in` keeps while the evaluation merges the EMA
EVALUATION_ADAPTER_BYTES_PER_PARAM = 4 * 4
LORA_RANK = 32  # the shared recipe's rank (configs/parts/official.yaml)

# Published config values (hub config.json of the released checkpoints), only what differs from the class defaults:
# name -> (transformers model class, config class, values).
HF_MODELS: dict[str, tuple[str, str, dict]] = {
    "T5_XXL": ("T5EncoderModel", "T5Config", dict(
        vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
        feed_forward_proj="gated-gelu")),
    "UMT5_XXL": ("UMT5EncoderModel", "UMT5Config", dict(  # Wan 2.1's text_encoder (umt5-xxl, its config.json)
        vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False)),
    "CLIP_L_TEXT": ("CLIPTextModelWithProjection", "CLIPTextConfig", dict(
        hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, projection_dim=768)),
    "CLIP_G_TEXT": ("CLIPTextModelWithProjection", "CLIPTextConfig", dict(
        hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=20, projection_dim=1280,
        hidden_act="gelu")),
    "GEMMA2_2B": ("Gemma2Model", "Gemma2Config", dict(
        vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256)),
    "QWEN25_VL_7B": ("Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLConfig", dict(  # Qwen-Image's text_encoder
        text_config=dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                         num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False),
        vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584,
                           fullatt_block_indexes=[7, 15, 23, 31]))),
    "CLIP_H14": ("CLIPModel", "CLIPConfig", dict(
        text_config=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16),
        vision_config=dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=16,
                           patch_size=14, image_size=224),
        projection_dim=1024)),
}
REWARD_MODEL = "CLIP_H14"  # the largest training reward backbone: CLIP ViT-H/14 (PickScore, HPSv2.1)


# ---------------------------------------------------------------------------------------------- parameters


def _transformers_meta(entry: tuple) -> nn.Module:
    import transformers

    model_cls, config_cls, values = entry
    config = getattr(transformers, config_cls)(**values)
    with torch.device("meta"):  # initialised: its init_weights ties T5's shared embedding to the encoder's
        return getattr(transformers, model_cls)(config)


def count_params(module: nn.Module) -> int:
    """Stored weights: parameters and persistent buffers (SD3's positional embedding table is a buffer: 226 M
    values in SD3.5-M, part of its published 2.5 B)."""
    unique = {t.untyped_storage()._cdata: t.numel() for t in module.state_dict().values()}  # tied weights once
    return sum(unique.values())


@lru_cache(maxsize=None)
def hf_params(name: str) -> int:
    """Parameters of a text encoder or the reward model (a HF_MODELS name, e.g. "T5_XXL"), on the meta device."""
    return count_params(_transformers_meta(HF_MODELS[name]))


@lru_cache(maxsize=None)
def vae_params(vae: str) -> int:
    import diffusers

    spec = VAE_DECODERS[vae]
    cls = getattr(diffusers, spec["cls"])  # imported before the init functions are disabled (`_no_init`)
    with torch.device("meta"), _no_init():
        return count_params(cls(**spec["kwargs"]))


def meta_transformer(model: str) -> nn.Module:
    """The full-size diffusers transformer of a planner model (flux1, sd35l, sd35m, sana) on the meta device."""
    import diffusers

    path = config_dir() / get_model(model).spec.config_file
    getattr(diffusers, json.loads(path.read_text())["_class_name"])  # imported before `_no_init` (its docstring)
    with _no_init():
        return build_meta_model(path)


@contextmanager
def _no_init():
    """Weight initialisation skipped while a diffusers model or peft's LoRA is built on the meta device: it writes
    nothing there, yet took about a third of the time (transformers' ``no_init_weights``, which its own
    ``from_pretrained`` uses; not for transformers' models, whose ``init_weights`` also ties weights).

    It replaces torch.nn.init's functions by no-ops while it lasts, so no module may be imported for the first time
    inside it that keeps a copy of them: diffusers' ``modeling_utils`` does (``TORCH_INIT_FUNCTIONS``), and, imported
    here, would keep the no-ops and put them back into torch.nn.init at every diffusers load for the rest of the
    process (every later nn.Linear and LoRA left uninitialised: NaN training). It and the model classes are imported
    before."""
    import diffusers.models.modeling_utils  # noqa: F401 -- see the docstring
    from transformers.initialization import no_init_weights

    with no_init_weights():
        yield


@lru_cache(maxsize=None)
def plain_transformer(model: str) -> nn.Module:
    """The full-size transformer of ``model`` on the meta device, without LoRA, built once: what the parameter
    counts, the LoRA counts of other targets and the explore copy's layers are read from. Never modify it."""
    return meta_transformer(model)


@lru_cache(maxsize=None)
def _training_module(model: str) -> nn.Module:
    """The full-size transformer of ``model`` as the update trains it (meta device): the base in bf16, frozen, and
    the LoRA at the model's ``official_rank`` on the official targets in the policy's ``MASTER_DTYPE`` (fp32), as
    ``LoraPolicy.attach`` keeps θ whatever the base's dtype. Built once (the fit check runs before every run)."""
    from solrl_core.rl.policy import MASTER_DTYPE

    module = meta_transformer(model)
    _attach_meta_lora(module, lora_targets(model), official_rank(model))
    module = module.to(torch.bfloat16)
    for name, p in module.named_parameters():
        if "lora_" in name:
            p.data = p.data.to(MASTER_DTYPE)
    return module


@lru_cache(maxsize=None)
def transformer_params(model: str) -> int:
    """Parameters of the full-size transformer of ``model`` (counted on the meta device)."""
    return count_params(plain_transformer(model))


def official_rank(model: str) -> int:
    """The LoRA rank of ``model``'s presets: its spec's own (Qwen-Image) or the shared recipe's ``LORA_RANK``."""
    rank = SPECS[model].lora_rank
    return LORA_RANK if rank is None else rank


def lora_targets(model: str) -> tuple[str, ...]:
    """The official LoRA targets of ``model`` as peft module-name suffixes (its spec's defaults)."""
    return tuple(SPECS[model].defaults.lora_targets)


def expert_counts(model: str, trained: tuple[str, ...] | None = None) -> tuple[int, int]:
    """(experts, trained experts) of ``model``: its spec's experts, each a transformer of its config file (1 for a
    model of one transformer), and of them those LoRA trains (``trained``: ``train.experts``; None: the spec's
    ``trained_experts``)."""
    spec = SPECS[model]
    if not spec.experts:
        return 1, 1
    return len(spec.experts), len(trained or spec.trained_experts or spec.experts)


def lora_params(module: nn.Module, targets: tuple[str, ...], rank: int = LORA_RANK) -> int:
    """Parameters of one LoRA adapter of ``rank`` on the Linear layers matching ``targets``: r·(in + out) each."""
    return sum(rank * (m.in_features + m.out_features) for _, m in targeted_linears(module, targets))


# ---------------------------------------------------------------------------------------------- activations


class _FlashLikeAttention(torch.autograd.Function):
    """Shapes-only stand-in for FlashAttention: saves query, key, value, output and the log-sum-exp per row."""

    @staticmethod
    def forward(ctx, query, key, value):
        out = query.new_empty((*query.shape[:-1], value.shape[-1]))
        lse = query.new_empty(query.shape[:-1], dtype=torch.float32)
        ctx.save_for_backward(query, key, value, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):  # pragma: no cover - the measurement never runs a backward
        raise NotImplementedError


def _flash_like_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **_):
    return _FlashLikeAttention.apply(query, key, value)


@contextmanager
def _flash_attention():
    original = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = _flash_like_sdpa
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original


def _attach_meta_lora(module: nn.Module, targets: tuple[str, ...], rank: int) -> None:
    from peft import LoraConfig, inject_adapter_in_model

    module.requires_grad_(False)
    with torch.device("meta"), _no_init():
        inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(targets)), module)


@dataclass(frozen=True)
class ActivationBytes:
    """Bytes saved for the backward by one training forward of one (sample, time) pair."""

    no_checkpointing: int  # everything the forward saves
    block_inputs: int  # the inputs of every block (kept under gradient checkpointing)
    outside_blocks: int  # saved by layers outside the blocks (embedders, final norm and projection)
    largest_block: int  # the largest one block saves (recomputed, one block at a time, during the backward)

    @property
    def checkpointed(self) -> int:
        return self.block_inputs + self.outside_blocks + self.largest_block


class _BlockReuse:
    """Runs each distinct transformer block once during the measurement. A block like one already run (the same
    modules, parameter shapes and attributes, inputs of the same shapes) is not run again: the bytes the first one
    saved in storages of its own are counted again, the inputs it saved are counted where this block's are new, and
    its outputs are shape-only stand-ins (this block's inputs where the first one returned an input). A diffusers
    transformer's blocks are repeats of one or two kinds, so the 60 blocks of Qwen-Image cost one block's forward
    (the whole forward on the meta device took ~1.5 s); ``_activation_bytes(..., reuse_blocks=False)`` runs every
    block and gives the same counts (tests/unit/planner/test_planner_memory_fits.py)."""

    def __init__(self):
        self.done: dict[tuple, dict] = {}  # key -> what the first such block saved and returned
        self.recording: dict | None = None  # of the block now running for the first time

    @staticmethod
    def signature(block: nn.Module) -> tuple:
        def attrs(mod):
            return tuple(sorted((k, v if isinstance(v, (bool, int, float, str, type(None))) else type(v).__name__)
                                for k, v in vars(mod).items() if not k.startswith("_")))

        return (tuple((n, type(m).__name__, attrs(m)) for n, m in block.named_modules()),
                tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in block.named_parameters()))

    def wrap(self, block: nn.Module, count_new: Callable[..., int]):
        """``block.forward`` replaced (an instance attribute: its hooks still run). ``count_new(t)`` counts a saved
        tensor's storage for the current block unless it was counted before; ``count_new(None, n)`` counts n bytes."""
        from torch.utils._pytree import tree_flatten, tree_unflatten

        original = block.forward
        signature = self.signature(block)

        def forward(*args, **kwargs):
            leaves, _ = tree_flatten((args, kwargs))
            key = (signature, tuple(("T", tuple(x.shape), x.dtype, x.requires_grad) if torch.is_tensor(x)
                                    else ("V", repr(x)) for x in leaves))
            first = self.done.get(key)
            if first is not None:
                count_new(None, first["internal"])
                for pos in first["saved_inputs"]:
                    count_new(leaves[pos])
                bases: dict[int, torch.Tensor] = {}  # outputs viewing one storage (FLUX's text / image split) still do
                outs = [leaves[o[1]] if o[0] == "input" else o[1] if o[0] == "value" else self.stand_in(bases, *o[1:])
                        for o in first["outputs"]]
                return tree_unflatten(outs, first["out_spec"])
            inputs = {x.untyped_storage()._cdata: i for i, x in enumerate(leaves) if torch.is_tensor(x)}
            self.recording = {"inputs": inputs, "internal": 0, "saved_inputs": set()}
            try:
                out = original(*args, **kwargs)
            finally:
                record, self.recording = self.recording, None
            out_leaves, out_spec = tree_flatten(out)
            by_id = {id(x): i for i, x in enumerate(leaves) if torch.is_tensor(x)}
            storages: dict[int, int] = {}
            record["outputs"] = [("input", by_id[id(x)]) if torch.is_tensor(x) and id(x) in by_id else
                                 ("tensor", storages.setdefault(x.untyped_storage()._cdata, len(storages)),
                                  x.untyped_storage().nbytes(), tuple(x.shape), x.stride(), x.storage_offset(), x.dtype,
                                  x.requires_grad) if torch.is_tensor(x) else
                                 ("value", x) for x in out_leaves]
            record["out_spec"] = out_spec
            self.done[key] = record
            return out

        block.forward = forward

    @staticmethod
    def stand_in(bases: dict[int, torch.Tensor], storage: int, nbytes: int, shape, stride, offset, dtype,
                 requires_grad: bool) -> torch.Tensor:
        """A meta tensor laid out as a recorded output, on a storage shared with the outputs that shared one."""
        base = bases.setdefault(storage, torch.empty(nbytes, dtype=torch.uint8, device="meta"))
        return base.view(dtype).as_strided(shape, stride, offset).requires_grad_(requires_grad)

    def saw(self, storage_id: int, nbytes: int, new: bool) -> None:
        """A tensor saved for the backward while a block runs for the first time (``new``: counted now)."""
        record = self.recording
        if record is None:
            return
        position = record["inputs"].get(storage_id)
        if position is not None:
            record["saved_inputs"].add(position)
        elif new:
            record["internal"] += nbytes


def activation_bytes(model: str, image_tokens: int | None = None, text_tokens: int | None = None) -> ActivationBytes:
    """What one training forward of ``model`` saves for the backward (see the module docstring), in bytes, for one
    sample of ``image_tokens`` image and ``text_tokens`` text tokens (default: the official resolution and text
    length)."""
    m = get_model(model)
    return _activation_bytes(m.key, image_tokens or m.spec.image_tokens, text_tokens or m.spec.text_tokens)


def _meta_inputs(m, image_tokens: int, text_tokens: int) -> dict:
    """One sample's forward inputs on the meta device, floating ones in bf16 (positions ids as they are)."""
    config = json.loads((config_dir() / m.spec.config_file).read_text())
    return {k: v.to(torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point() and not k.endswith("_ids")
            else v for k, v in example_inputs(m.spec.kind, config, image_tokens, text_tokens).items()}


@lru_cache(maxsize=None)
def _activation_bytes(model: str, image_tokens: int, text_tokens: int, reuse_blocks: bool = True) -> ActivationBytes:
    m = get_model(model)
    module = _training_module(m.key)
    inputs = _meta_inputs(m, image_tokens, text_tokens)
    params = {p.untyped_storage()._cdata for p in module.parameters()}
    seen: set[int] = set()
    keep: list[torch.Tensor] = []  # hold the saved tensors so their storages are not reused mid-count
    per_block: dict[str | None, int] = {}
    block_inputs: dict[str, int] = {}
    current: list[str | None] = [None]
    reuse = _BlockReuse() if reuse_blocks else None

    def count_new(t: torch.Tensor | None, nbytes: int = 0) -> int:
        """Count ``t``'s storage for the current block unless it is a parameter or counted before (``t`` None:
        ``nbytes`` counted as such)."""
        if t is not None:
            storage = t.untyped_storage()
            if storage._cdata in params or storage._cdata in seen:
                return 0
            seen.add(storage._cdata)
            keep.append(t)
            nbytes = storage.nbytes()
        per_block[current[0]] = per_block.get(current[0], 0) + nbytes
        return nbytes

    def pack(t: torch.Tensor) -> torch.Tensor:
        counted = count_new(t)
        if reuse is not None:
            reuse.saw(t.untyped_storage()._cdata, counted, counted > 0)
        return t

    def enter(name):
        def hook(_module, args, kwargs):
            current[0] = name
            tensors = [a for a in (*args, *kwargs.values()) if torch.is_tensor(a)]
            block_inputs[name] = sum(a.numel() * a.element_size() for a in tensors)
        return hook

    def leave(_module, _args, _out):
        current[0] = None

    handles = []
    for name, block in transformer_blocks(module).items():
        handles.append(block.register_forward_pre_hook(enter(name), with_kwargs=True))
        handles.append(block.register_forward_hook(leave))
        if reuse is not None:
            reuse.wrap(block, count_new)
    try:
        with _flash_attention(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module(**inputs, return_dict=False)
    finally:
        for h in handles:
            h.remove()
        for block in transformer_blocks(module).values():
            block.__dict__.pop("forward", None)  # the class's forward again (the module is cached)
    inside = {k: v for k, v in per_block.items() if k is not None}
    return ActivationBytes(
        no_checkpointing=sum(per_block.values()),
        block_inputs=sum(block_inputs.values()),
        outside_blocks=per_block.get(None, 0),
        largest_block=max(inside.values(), default=0),
    )


def sampling_bytes(model: str, image_tokens: int | None = None, text_tokens: int | None = None) -> int:
    """What one sample of a sampling batch adds to its stage's peak, in bytes: its input latent and conditioning and
    the most a no-grad forward of it holds at once besides the weights (bf16, attention as FlashAttention computes
    it: no score matrix), measured on the meta device (``planner.live_bytes``). A batch of B samples holds B times
    this (a no-grad forward's tensors scale with the batch); classifier-free guidance runs 2B."""
    m = get_model(model)
    return _sampling_bytes(m.key, image_tokens or m.spec.image_tokens, text_tokens or m.spec.text_tokens)


@lru_cache(maxsize=None)
def _sampling_bytes(model: str, image_tokens: int, text_tokens: int) -> int:
    from solrl_core.planner.live_bytes import peak_bytes

    m = get_model(model)
    module = _inference_module(m.key)
    inputs = _meta_inputs(m, image_tokens, text_tokens)
    tensors = [v for v in inputs.values() if torch.is_tensor(v)]
    with torch.no_grad(), _flash_attention():
        forward = peak_bytes(lambda *_: module(**inputs, return_dict=False), *tensors)
    return forward + sum(t.untyped_storage().nbytes() for t in tensors)


@lru_cache(maxsize=None)
def _inference_module(model: str) -> nn.Module:
    """The full-size transformer of ``model`` in bf16 on the meta device, as a sampling copy runs it."""
    return meta_transformer(model).to(torch.bfloat16).requires_grad_(False)


# ---------------------------------------------------------------------------------------------- the estimate


@dataclass(frozen=True)
class MemoryEstimate:
    model: str
    title: str
    transformer_params: int
    lora_params: int
    text_encoder_params: dict[str, int]
    vae_params: int
    reward_params: int
    micro_batch: int
    activation_per_pair: int  # bytes, checkpointed
    activation_per_pair_no_checkpointing: int  # bytes
    gib: dict[str, float]  # component -> GiB
    lora_rank: int = LORA_RANK
    experts: int = 1  # transformers of the model (``transformer_params`` counts them all)
    gradient_checkpointing: bool = True  # whether ``gib["activations"]`` is the checkpointed figure
    explore_copy: str = ""  # the explore precision priced (``ExploreBackend.describe``)
    lora_branch: bool = True  # quant.lora_branch: θ_old beside the quantized base, no merged layers in the copy
    explore_gib: dict[str, float] | None = None  # what the explore copy adds to W0: quantized and merged layers
    merged_gib: float = 0.0  # the targeted layers' W0 + ΔW, as the evaluation's policy holds them
    sampling_gib: dict[str, float] | None = None  # stage -> its sampling batch's activations (None: not counted)
    adapter: str = "lora"  # train.adapter: lora, or full (every weight trained; `policy_gib` in the sampling stages)
    processes: int = 1  # the update's ranks (FSDP2 shards the full training state over them)
    policy_gib: float = 0.0  # full: the whole θ_old (or EMA) copy at the model's dtype a sampling stage holds

    @property
    def total_gib(self) -> float:
        """The update stage: everything in ``gib``."""
        return sum(self.gib.values())

    @property
    def beside_transformer_gib(self) -> float:
        """What every stage holds besides the transformer and its LoRA: text encoders, VAE and reward model."""
        g = self.gib
        return g["text_encoders"] + g["vae"] + g["reward"]

    def stage_parts(self) -> dict[str, dict[str, float]]:
        """GiB per part of each stage's peak per GPU, by stage (the module docstring), each with the text encoders,
        VAE and reward model; sampling batches without grad are not counted.

        ``explore``: W0 + the layers the explore precision replaced (``quantized``) + the merged W0 + ΔW(θ_old) of
        the targeted layers the copy keeps in high precision (``merged``; none with lora_branch), and θ and θ_old
        (fp32): with lora_branch they are attached last, beside the built copy; without, they are freed once merged,
        before any layer is quantized, so they count only where they outweigh the quantized layers.
        ``regenerate`` and ``audit``: W0 with θ_old as an unmerged LoRA branch, θ and θ_old. ``update``: everything
        in ``gib``. ``evaluation``: W0 + the merged EMA policy's targeted layers, with θ, θ_old, the EMA and θ's copy
        while it merges."""
        g = self.gib
        beside = {"text_encoders": g["text_encoders"], "vae": g["vae"], "reward": g["reward"]}
        if self.adapter == "full":  # a whole θ_old / EMA copy beside W0 (the module docstring)
            copy = {"policy": self.policy_gib}
            stages = {stage: {"weights": g["weights"], **copy, **beside}
                      for stage in ("explore", "regenerate", "evaluation", "audit")}
            stages["update"] = dict(g)
            for stage, gib in (self.sampling_gib or {}).items():
                stages[stage] = {**stages[stage], "sampling": gib}
            return stages
        adapters = self.lora_params * ADAPTER_BYTES_PER_PARAM / GIB
        copy = self.explore_gib or {"quantized": 0.0, "merged": 0.0}
        explore_adapters = adapters if self.lora_branch else max(0.0, adapters - copy["quantized"])
        explore = {"weights": g["weights"], **copy, "adapters": explore_adapters, **beside}
        branch = {"weights": g["weights"], "adapters": adapters, **beside}
        evaluation = {"weights": g["weights"], "merged": self.merged_gib,
                      "adapters": self.lora_params * EVALUATION_ADAPTER_BYTES_PER_PARAM / GIB, **beside}
        stages = {"explore": explore, "regenerate": branch, "update": dict(g), "evaluation": evaluation,
                  "audit": dict(branch)}
        for stage, gib in (self.sampling_gib or {}).items():
            stages[stage] = {**stages[stage], "sampling": gib}
        return stages

    @property
    def inference_gib(self) -> float:
        """The explore stage (``stage_parts``)."""
        return sum(self.stage_parts()["explore"].values())

    @property
    def regenerate_gib(self) -> float:
        """The regenerate stage (``stage_parts``)."""
        return sum(self.stage_parts()["regenerate"].values())

    @property
    def evaluation_gib(self) -> float:
        """The evaluation (``stage_parts``)."""
        return sum(self.stage_parts()["evaluation"].values())

    def to_dict(self) -> dict:
        d = asdict(self)
        d["total_gib"] = self.total_gib
        d["inference_gib"] = self.inference_gib
        d["regenerate_gib"] = self.regenerate_gib
        d["evaluation_gib"] = self.evaluation_gib
        return d


def official_explore_copy() -> ExploreCopy:
    """The official recipe's explore copy on the paper's GPU: ``explore.precision: auto`` on a B200 (NVFP4 through
    Transformer Engine) with ``quant.lora_branch: true`` (configs/parts/official.yaml), the backbone's rule."""
    from solrl_core.planner.explore_copy import backend_on_gpu
    from solrl_core.planner.gpus import PAPER_GPU, get_gpu

    return ExploreCopy(backend_on_gpu("auto", get_gpu(PAPER_GPU)), lora_branch=True)


@lru_cache(maxsize=256)
def _copy_bytes(model: str, copy: ExploreCopy, targets: tuple[str, ...], dtype: str) -> tuple[dict[str, int], int]:
    """(what the explore copy adds to W0, the merged targeted layers) in bytes (``planner.explore_copy``)."""
    d = SPECS[model].defaults
    module, torch_dtype = plain_transformer(model), DTYPES[dtype]
    skip = copy.skip_names if copy.skip_names is not None else tuple(d.quant_skip_names)
    min_width = copy.min_width if copy.min_width is not None else d.quant_min_width
    return (explore_copy_bytes(module, copy, skip, min_width, targets, torch_dtype),
            merged_bytes(module, targets, torch_dtype))


def memory_estimate(model: str, micro_batch: int | None = None, text_encoders_resident: bool = True, *,
                    lora_rank: int | None = None, lora_targets: tuple[str, ...] | None = None,
                    gradient_checkpointing: bool = True, image_tokens: int | None = None,
                    text_tokens: int | None = None, dtype: str = "bfloat16",
                    explore: ExploreCopy | None = None, samples_bytes: int = 0,
                    sampling_batches: dict[str, int] | None = None, adapter: str = "lora",
                    processes: int = 1, trained_experts: tuple[str, ...] | None = None) -> MemoryEstimate:
    """The rough per-GPU training memory of ``model`` (see the module docstring for what is counted), by default
    as the model's presets run it; the keywords describe another run: the rank (None: ``official_rank``) and
    targets of θ and θ_old, the update without gradient checkpointing, one sample's image and text tokens (another
    resolution or text length: the activations are measured at those), ``model.dtype`` (float32: 4 bytes per value
    of the transformer, text encoders and VAE; the activations are then counted at the same width), and the explore
    copy (default: ``official_explore_copy``), and the bytes of the iteration's samples the update holds on every
    rank (``planner.disk.update_samples_bytes``: the latents, a Flow-GRPO trajectory; 0 in the official table), and
    the samples per forward of each sampling stage (``sampling_batches``: stage -> samples, twice the batch under
    classifier-free guidance), whose activations (``sampling_bytes`` each) join those stages (none in the official
    table). The activations are measured with the official targets at the official rank, at any rank or targets.
    ``adapter="full"`` prices full fine-tuning over ``processes`` update ranks (the module docstring);
    ``trained_experts`` the experts a model of several trains (``train.experts``; None: its spec's)."""
    m = get_model(model)
    key = m.key
    if key not in SPECS:
        from solrl_core.errors import SolrlError

        raise SolrlError(f"no memory estimate for '{model}' (known: {', '.join(SPECS)})")
    spec = SPECS[key]
    micro_batch = spec.micro_batch if micro_batch is None else micro_batch
    lora_rank = official_rank(key) if lora_rank is None else lora_rank
    explore = official_explore_copy() if explore is None else explore
    targets = tuple(lora_targets) if lora_targets else tuple(spec.defaults.lora_targets)
    weight_bytes = DTYPES[dtype].itemsize
    experts, trained = expert_counts(key, trained_experts)
    params = transformer_params(key) * experts
    lora = lora_params(plain_transformer(key), targets, lora_rank) * trained
    copy, merged = _copy_bytes(key, explore, targets, dtype)
    copy = {part: size * (trained if part == "merged" else experts) for part, size in copy.items()}
    merged *= trained
    text = {title: hf_params(name) for title, name in spec.text_encoders.items()}
    vae = vae_params(m.vae)
    reward = hf_params(REWARD_MODEL)
    act = activation_bytes(key, image_tokens, text_tokens)
    per_pair = act.checkpointed if gradient_checkpointing else act.no_checkpointing
    gib = {
        "weights": params * weight_bytes / GIB,
        "lora": lora * LORA_BYTES_PER_PARAM / GIB,
        "text_encoders": (sum(text.values()) * weight_bytes / GIB) if text_encoders_resident else 0.0,
        "vae": vae * weight_bytes / GIB,
        "reward": reward * BF16 / GIB,
        "activations": micro_batch * per_pair * (weight_bytes / BF16) / GIB,
        "samples": samples_bytes / GIB,
    }
    full = adapter == "full"
    if full:
        del gib["lora"]
        gib["full_state"] = params * FULL_BYTES_PER_PARAM / processes / GIB
        block = max((sum(p.numel() for p in b.parameters()) for b in transformer_blocks(plain_transformer(key)).values()),
                    default=0)
        gib["gathered"] = block * (2 * weight_bytes + 4) / GIB if processes > 1 else 0.0
    return MemoryEstimate(
        model=key, title=spec.title, transformer_params=params, lora_params=lora, text_encoder_params=text,
        vae_params=vae, reward_params=reward, micro_batch=micro_batch, activation_per_pair=act.checkpointed,
        activation_per_pair_no_checkpointing=act.no_checkpointing, gib=gib, lora_rank=lora_rank, experts=experts,
        gradient_checkpointing=gradient_checkpointing, explore_copy=explore.backend.describe(),
        lora_branch=explore.lora_branch, explore_gib={k: v / GIB for k, v in copy.items()}, merged_gib=merged / GIB,
        sampling_gib=_sampling_gib(key, sampling_batches, image_tokens, text_tokens, weight_bytes),
        adapter=adapter, processes=processes, policy_gib=params * weight_bytes / GIB if full else 0.0,
    )


def _sampling_gib(model: str, batches: dict[str, int] | None, image_tokens, text_tokens,
                  weight_bytes: int) -> dict[str, float] | None:
    """Each sampling stage's batch activations (``sampling_bytes`` per sample, at the weights' width)."""
    if not batches:
        return None
    per_sample = sampling_bytes(model, image_tokens, text_tokens) * (weight_bytes / BF16)
    return {stage: samples * per_sample / GIB for stage, samples in batches.items()}


def format_markdown(rows: list[MemoryEstimate]) -> str:
    """The estimate as a markdown table (GiB per GPU; parameters in billions / millions); the explore stage with
    each row's explore copy (default: ``official_explore_copy``)."""
    lines = [
        "| model | transformer | LoRA (r 32 unless noted) | text encoders | GiB: W0 | LoRA state | text encoders "
        "(resident) | VAE + reward | activations (micro-batch × per pair) | **total** | one pair without "
        "checkpointing | explore stage | regenerate stage | evaluation |",
        "|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        g = r.gib
        encoders = " + ".join(f"{n} {p / 1e9:.2f} B" for n, p in r.text_encoder_params.items())
        rank = "" if r.lora_rank == LORA_RANK else f" (r {r.lora_rank})"
        lines.append(
            f"| {r.title} | {_params_text(r)} | {r.lora_params / 1e6:.1f} M{rank} | {encoders} | "
            f"{g['weights']:.1f} | {g['lora']:.1f} | {g['text_encoders']:.1f} | {g['vae'] + g['reward']:.1f} | "
            f"{g['activations']:.1f} ({r.micro_batch} × {r.activation_per_pair / GIB:.2f}) | **{r.total_gib:.0f}** | "
            f"{r.activation_per_pair_no_checkpointing / GIB:.1f} | {r.inference_gib:.0f} | {r.regenerate_gib:.0f} | "
            f"{r.evaluation_gib:.0f} |"
        )
    return "\n".join(lines)


def _params_text(r: MemoryEstimate) -> str:
    """The transformer's parameters: "14.29 B", or per expert for a model of several ("2 × 14.29 B")."""
    each = f"{r.transformer_params / r.experts / 1e9:.2f} B"
    return each if r.experts == 1 else f"{r.experts} × {each}"


def format_full_markdown(rows: list[MemoryEstimate]) -> str:
    """Full fine-tuning's estimate as a markdown table (GiB per GPU): the update's parts, the sampling stages' peak,
    and the largest stage (what `solrl plan` checks against a card, less its margin)."""
    lines = ["| model | update ranks | GiB: W0 | full training state (per rank) | gathered blocks | activations | "
             "**update** | explore / regenerate / evaluation | largest stage |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        g = r.gib
        peak = max(sum(p.values()) for p in r.stage_parts().values())
        lines.append(f"| {r.title} | {r.processes} | {g['weights']:.1f} | {g['full_state']:.1f} | {g['gathered']:.1f} "
                     f"| {g['activations']:.1f} | **{r.total_gib:.0f}** | {r.inference_gib:.0f} | {peak:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solrl_core.planner.memory",
                                     description="Parameter counts and a rough per-GPU training memory estimate.")
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--full", type=int, metavar="RANKS", default=None,
                        help="price full fine-tuning (train.adapter: full) sharded over RANKS update processes")
    args = parser.parse_args(argv)
    if args.full is not None:
        rows = [memory_estimate(name, adapter="full", processes=args.full) for name in args.models]
        print(json.dumps([r.to_dict() for r in rows], indent=2) if args.json else format_full_markdown(rows))
        return 0
    rows = [memory_estimate(name) for name in args.models]
    print(json.dumps([r.to_dict() for r in rows], indent=2) if args.json else format_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
