"""Parameter counts of the full-size backbones and a rough estimate of the GPU memory of one training process.

Everything is built on the meta device (no weights, no memory): the diffusers transformers from their configs in
``solrl_core/model_configs`` (``solrl_core.quant.coverage.build_meta_model``), the VAEs from the planner's public VAE
configs (``solrl_core.planner.flops.VAE_DECODERS``), and the text encoders and the reward model from the published
config values below (their parameter counts match the released checkpoints).

The memory estimate is rough. Per GPU, during the update, in GiB:

* ``weights``       — the transformer in bf16, once: the policy's LoRA layers wrap a copy of the module tree whose
                      weights are the cached base W0 (``stages.transformer_copies.weight_sharing_transformer``);
* ``lora``          — the official LoRA targets at rank 32 in fp32: θ with its gradient and AdamW's two moments,
                      θ_old and the EMA of θ (6 × 4 bytes per LoRA parameter);
* ``text_encoders`` — bf16, resident (``model.release_text_encoders`` frees them once every prompt is cached);
* ``vae``           — the whole autoencoder in bf16;
* ``reward``        — the largest training reward model in bf16 (CLIP ViT-H/14: PickScore, HPSv2.1);
* ``activations``   — with gradient checkpointing per transformer block, for ``micro_batch`` (sample, time) pairs:
                      the block inputs kept for the backward, what the layers outside the blocks save, and the
                      largest block's saved tensors while it is recomputed. Measured on the meta device with
                      ``torch.autograd.graph.saved_tensors_hooks`` on one pair at the official resolution (bf16, base
                      frozen, LoRA on the official targets); attention counts as FlashAttention does (query, key,
                      value, output and the per-row log-sum-exp, no score matrix).
The explore stage holds W0 plus the quantized inference copy (merged W0 + θ_old, or with ``quant.lora_branch`` W0
alone with θ_old's LoRA beside it) and no training state (``MemoryEstimate.inference_gib``); for FLUX and SD3.5-L
that is the larger of the two. The regenerate stage holds no copy: θ_old runs as a LoRA branch on the cached W0
(``stages.old_policy``), so W0 once plus the adapters θ and θ_old in fp32 (``MemoryEstimate.regenerate_gib``).
Left out: CUDA context and allocator fragmentation (add ~2–4 GiB), the inference copies' sampling batches, text
embeddings of the iteration's samples, and the no-grad forwards of v_old and v_ref (their
activations are freed as they go).

    python -m solrl_core.planner.memory        # the table, as in the README
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import lru_cache

import torch
from torch import nn

from solrl_core.backbones.registry import backbone_specs
from solrl_core.backbones.spec import BackboneSpec
from solrl_core.model_configs import config_dir
from solrl_core.planner.flops import VAE_DECODERS, example_inputs, get_model
from solrl_core.quant.coverage import build_meta_model

# the backbones with a full-size model (their specs: official LoRA targets, micro-batch, text encoders, title)
SPECS: dict[str, BackboneSpec] = {s.key: s for s in backbone_specs() if s.config_file}
MODELS = tuple(SPECS)
GIB = 2**30
BF16 = 2
LORA_BYTES_PER_PARAM = 6 * 4  # fp32: θ, its gradient, AdamW m and v, θ_old, EMA
ADAPTER_BYTES_PER_PARAM = 2 * 4  # fp32: θ and θ_old, the adapters a sampling process attaches (no training state)
LORA_RANK = 32

# Published config values (hub config.json of the released checkpoints), only what differs from the class defaults:
# name -> (transformers model class, config class, values).
HF_MODELS: dict[str, tuple[str, str, dict]] = {
    "T5_XXL": ("T5EncoderModel", "T5Config", dict(
        vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
        feed_forward_proj="gated-gelu")),
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
    with torch.device("meta"):
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
    with torch.device("meta"):
        return count_params(getattr(diffusers, spec["cls"])(**spec["kwargs"]))


def meta_transformer(model: str) -> nn.Module:
    """The full-size diffusers transformer of a planner model (flux1, sd35l, sd35m, sana) on the meta device."""
    m = get_model(model)
    return build_meta_model(config_dir() / m.spec.config_file)


@lru_cache(maxsize=None)
def transformer_params(model: str) -> int:
    """Parameters of the full-size transformer of ``model`` (counted on the meta device)."""
    return count_params(meta_transformer(model))


def lora_targets(model: str) -> tuple[str, ...]:
    """The official LoRA targets of ``model`` as peft module-name suffixes (its spec's defaults)."""
    return tuple(SPECS[model].defaults.lora_targets)


def _matches(name: str, targets: tuple[str, ...]) -> bool:
    """peft's rule for a target given as a name suffix."""
    return any(name == t or name.endswith("." + t) for t in targets)


def lora_params(module: nn.Module, targets: tuple[str, ...], rank: int = LORA_RANK) -> int:
    """Parameters of one LoRA adapter of ``rank`` on the Linear layers matching ``targets``: r·(in + out) each."""
    return sum(rank * (m.in_features + m.out_features) for n, m in module.named_modules()
               if isinstance(m, nn.Linear) and _matches(n, targets))


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
    with torch.device("meta"):
        inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(targets)), module)


def _blocks(module: nn.Module) -> dict[str, nn.Module]:
    """The transformer blocks (children of the top-level ModuleLists): the units diffusers checkpoints."""
    return {f"{name}.{i}": block for name, child in module.named_children() if isinstance(child, nn.ModuleList)
            for i, block in enumerate(child)}


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


@lru_cache(maxsize=None)
def activation_bytes(model: str) -> ActivationBytes:
    """What one training forward of ``model`` saves for the backward (see the module docstring), in bytes."""
    m = get_model(model)
    module = meta_transformer(model)
    _attach_meta_lora(module, lora_targets(m.key), LORA_RANK)
    module = module.to(torch.bfloat16)
    config = json.loads((config_dir() / m.spec.config_file).read_text())
    inputs = {k: v.to(torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point() and not k.endswith("_ids")
              else v for k, v in example_inputs(m.spec.kind, config, m.spec.image_tokens, m.spec.text_tokens).items()}
    params = {p.untyped_storage()._cdata for p in module.parameters()}
    seen: set[int] = set()
    keep: list[torch.Tensor] = []  # hold the saved tensors so their storages are not reused mid-count
    per_block: dict[str | None, int] = {}
    block_inputs: dict[str, int] = {}
    current: list[str | None] = [None]

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage._cdata not in params and storage._cdata not in seen:
            seen.add(storage._cdata)
            keep.append(t)
            per_block[current[0]] = per_block.get(current[0], 0) + storage.nbytes()
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
    for name, block in _blocks(module).items():
        handles.append(block.register_forward_pre_hook(enter(name), with_kwargs=True))
        handles.append(block.register_forward_hook(leave))
    try:
        with _flash_attention(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module(**inputs, return_dict=False)
    finally:
        for h in handles:
            h.remove()
    inside = {k: v for k, v in per_block.items() if k is not None}
    return ActivationBytes(
        no_checkpointing=sum(per_block.values()),
        block_inputs=sum(block_inputs.values()),
        outside_blocks=per_block.get(None, 0),
        largest_block=max(inside.values(), default=0),
    )


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

    @property
    def total_gib(self) -> float:
        """The update stage: everything in ``gib``."""
        return sum(self.gib.values())

    @property
    def beside_transformer_gib(self) -> float:
        """What every stage holds besides the transformer and its LoRA: text encoders, VAE and reward model."""
        g = self.gib
        return g["text_encoders"] + g["vae"] + g["reward"]

    @property
    def inference_gib(self) -> float:
        """The explore stage: W0 (cached) + the quantized inference copy, text encoders, VAE and reward; no LoRA
        optimizer state, and sampling batches without grad (not counted). The copy is counted at full size (bf16):
        so it is when emulated or on the FP8/BF16 fallbacks; Transformer Engine's NVFP4 layers hold less."""
        return 2 * self.gib["weights"] + self.beside_transformer_gib

    @property
    def regenerate_gib(self) -> float:
        """The regenerate stage: W0 (cached) with θ_old as an unmerged LoRA branch (no copy), text encoders, VAE and
        reward; sampling batches without grad (not counted)."""
        return self.gib["weights"] + self.lora_params * ADAPTER_BYTES_PER_PARAM / GIB + self.beside_transformer_gib

    def to_dict(self) -> dict:
        d = asdict(self)
        d["total_gib"] = self.total_gib
        d["inference_gib"] = self.inference_gib
        d["regenerate_gib"] = self.regenerate_gib
        return d


def memory_estimate(model: str, micro_batch: int | None = None, text_encoders_resident: bool = True) -> MemoryEstimate:
    """The rough per-GPU training memory of ``model`` (see the module docstring for what is counted)."""
    m = get_model(model)
    key = m.key
    if key not in SPECS:
        from solrl_core.errors import SolrlError

        raise SolrlError(f"no memory estimate for '{model}' (known: {', '.join(SPECS)})")
    spec = SPECS[key]
    micro_batch = spec.micro_batch if micro_batch is None else micro_batch
    params = transformer_params(key)
    lora = lora_params(meta_transformer(key), lora_targets(key))
    text = {title: hf_params(name) for title, name in spec.text_encoders.items()}
    vae = vae_params(m.vae)
    reward = hf_params(REWARD_MODEL)
    act = activation_bytes(key)
    gib = {
        "weights": params * BF16 / GIB,
        "lora": lora * LORA_BYTES_PER_PARAM / GIB,
        "text_encoders": (sum(text.values()) * BF16 / GIB) if text_encoders_resident else 0.0,
        "vae": vae * BF16 / GIB,
        "reward": reward * BF16 / GIB,
        "activations": micro_batch * act.checkpointed / GIB,
    }
    return MemoryEstimate(
        model=key, title=spec.title, transformer_params=params, lora_params=lora, text_encoder_params=text,
        vae_params=vae, reward_params=reward, micro_batch=micro_batch, activation_per_pair=act.checkpointed,
        activation_per_pair_no_checkpointing=act.no_checkpointing, gib=gib,
    )


def format_markdown(rows: list[MemoryEstimate]) -> str:
    """The estimate as a markdown table (GiB per GPU; parameters in billions / millions)."""
    lines = [
        "| model | transformer | LoRA r 32 | text encoders | GiB: W0 | LoRA state | text encoders "
        "(resident) | VAE + reward | activations (micro-batch × per pair) | **total** | one pair without "
        "checkpointing | explore stage | regenerate stage |",
        "|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        g = r.gib
        encoders = " + ".join(f"{n} {p / 1e9:.2f} B" for n, p in r.text_encoder_params.items())
        lines.append(
            f"| {r.title} | {r.transformer_params / 1e9:.2f} B | {r.lora_params / 1e6:.1f} M | {encoders} | "
            f"{g['weights']:.1f} | {g['lora']:.1f} | {g['text_encoders']:.1f} | {g['vae'] + g['reward']:.1f} | "
            f"{g['activations']:.1f} ({r.micro_batch} × {r.activation_per_pair / GIB:.2f}) | **{r.total_gib:.0f}** | "
            f"{r.activation_per_pair_no_checkpointing / GIB:.1f} | {r.inference_gib:.0f} | {r.regenerate_gib:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solrl_core.planner.memory",
                                     description="Parameter counts and a rough per-GPU training memory estimate.")
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [memory_estimate(name) for name in args.models]
    print(json.dumps([r.to_dict() for r in rows], indent=2) if args.json else format_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
