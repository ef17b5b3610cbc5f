"""The case the full-policy tests train: the embedded image transformer at one layer (random weights, seeded), and a
fixed batch whose rows a rank's share of the loss is computed over (weighted by the share, so the ranks' gradients
sum to the whole batch's)."""

from __future__ import annotations

import torch

BATCH = 4


def tiny_transformer() -> torch.nn.Module:
    from diffusers import SD3Transformer2DModel

    from solrl_core.models.embedded.model import transformer_config

    torch.manual_seed(0)
    return SD3Transformer2DModel(**{**transformer_config(), "num_layers": 2}).eval()


def batch() -> dict[str, torch.Tensor]:
    """Inputs and targets of BATCH rows, the same in every process."""
    from solrl_core.models.embedded.model import transformer_config

    config = transformer_config()
    g = torch.Generator().manual_seed(1)
    size = config["sample_size"]
    return {"x": torch.randn(BATCH, config["in_channels"], size, size, generator=g),
            "t": torch.rand(BATCH, generator=g) * 1000,
            "text": torch.randn(BATCH, 6, config["joint_attention_dim"], generator=g),
            "pooled": torch.randn(BATCH, config["pooled_projection_dim"], generator=g),
            "target": torch.randn(BATCH, config["out_channels"], size, size, generator=g)}


def batch_loss(module: torch.nn.Module, rows: torch.Tensor) -> torch.Tensor:
    """The mean squared error of `module`'s output on `rows` of the batch, times their share of the batch."""
    data = {k: v[rows] for k, v in batch().items()}
    out = module(hidden_states=data["x"], timestep=data["t"], encoder_hidden_states=data["text"],
                 pooled_projections=data["pooled"], return_dict=False)[0]
    return (out.float() - data["target"]).pow(2).mean() * (len(rows) / BATCH)
