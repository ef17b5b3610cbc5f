"""A tiny SD3 transformer (random weights, seeded) for the quantization tests, the layers SD3.5-Large keeps in high
precision, a fixed forward pass through it, and a LoRA-like change of its merged weights."""

import torch

# SD3.5-Large's list of layers kept in high precision (docs/method.md).
SD35_SKIP = ["pos_embed", "context_embedder", "time_text_embed", "norm_out", "norm1", "ff_context"]


def tiny_sd3():
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(0)
    return SD3Transformer2DModel(
        sample_size=8,
        patch_size=2,
        in_channels=3,
        out_channels=3,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        caption_projection_dim=32,
        pooled_projection_dim=32,
        pos_embed_max_size=16,
    ).eval()


def forward_fn(model):
    g = torch.Generator().manual_seed(0)
    inputs = dict(
        hidden_states=torch.randn(2, 3, 8, 8, generator=g),
        encoder_hidden_states=torch.randn(2, 7, 32, generator=g),
        pooled_projections=torch.randn(2, 32, generator=g),
        timestep=torch.tensor([500.0, 20.0]),
        return_dict=False,
    )
    return lambda: model(**inputs)[0]

LORA_TARGETS = ("attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0")


def lora_update(merged: dict, seed: int, rank: int = 2, scale: float = 0.05) -> dict:
    """A merged-adapter change: W += B·A on the attention projections of block 0, plus one non-Linear tensor."""
    g = torch.Generator().manual_seed(seed)
    new = {k: v.clone() for k, v in merged.items()}
    for target in LORA_TARGETS:
        key = f"transformer_blocks.0.{target}.weight"
        out_f, in_f = new[key].shape
        new[key] += scale * torch.randn(out_f, rank, generator=g) @ torch.randn(rank, in_f, generator=g)
    new["transformer_blocks.0.attn.to_q.bias"] += 0.01
    new["transformer_blocks.1.ff.net.2.weight"] += 0.02  # a layer outside the adapter's targets
    new["pos_embed.proj.weight"] = new["pos_embed.proj.weight"] * 1.1  # not a Linear (the patch conv)
    return new
