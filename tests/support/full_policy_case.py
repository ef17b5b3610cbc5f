"""The cases the full-policy tests train: the embedded image transformer at two layers, or the tiny FLUX.1 of
`solrl make-tiny flux1` (one double and one single block), with random weights (seeded), and a fixed batch whose rows
a rank's share of the loss is computed over (weighted by the share, so the ranks' gradients sum to the whole batch's)."""

from __future__ import annotations

import torch

BATCH = 4
MODELS = ("embedded", "flux1")


def tiny_transformer(model: str = "embedded") -> torch.nn.Module:
    if model == "flux1":
        from solrl_core.models.backbones.tiny.flux import tiny_transformer as tiny_flux

        return tiny_flux()
    from diffusers import SD3Transformer2DModel

    from solrl_core.models.embedded.model import transformer_config

    torch.manual_seed(0)
    return SD3Transformer2DModel(**{**transformer_config(), "num_layers": 2}).eval()


def batch(model: str = "embedded") -> dict[str, torch.Tensor]:
    """Inputs and targets of BATCH rows, the same in every process."""
    g = torch.Generator().manual_seed(1)
    if model == "flux1":
        from solrl_core.models.backbones.tiny.flux import CLIP_WIDTH, LATENT_CHANNELS, T5_WIDTH

        tokens, text = 16, 6  # a 4 x 4 grid of packed latent patches, 6 text tokens
        return {"x": torch.randn(BATCH, tokens, 4 * LATENT_CHANNELS, generator=g),
                "t": torch.rand(BATCH, generator=g),
                "text": torch.randn(BATCH, text, T5_WIDTH, generator=g),
                "pooled": torch.randn(BATCH, CLIP_WIDTH, generator=g),
                "guidance": torch.full((BATCH,), 3.5),
                "target": torch.randn(BATCH, tokens, 4 * LATENT_CHANNELS, generator=g)}
    from solrl_core.models.embedded.model import transformer_config

    config = transformer_config()
    size = config["sample_size"]
    return {"x": torch.randn(BATCH, config["in_channels"], size, size, generator=g),
            "t": torch.rand(BATCH, generator=g) * 1000,
            "text": torch.randn(BATCH, 6, config["joint_attention_dim"], generator=g),
            "pooled": torch.randn(BATCH, config["pooled_projection_dim"], generator=g),
            "target": torch.randn(BATCH, config["out_channels"], size, size, generator=g)}


def batch_loss(module: torch.nn.Module, rows: torch.Tensor, model: str = "embedded") -> torch.Tensor:
    """The mean squared error of `module`'s output on `rows` of the batch, times their share of the batch."""
    data = {k: v[rows] for k, v in batch(model).items()}
    if model == "flux1":
        side = int(data["x"].shape[1] ** 0.5)
        grid = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij"), -1).reshape(-1, 2)
        img_ids = torch.cat([torch.zeros(len(grid), 1), grid.float()], dim=1)
        txt_ids = torch.zeros(data["text"].shape[1], 3)
        out = module(hidden_states=data["x"], timestep=data["t"], guidance=data["guidance"],
                     encoder_hidden_states=data["text"], pooled_projections=data["pooled"], img_ids=img_ids,
                     txt_ids=txt_ids, return_dict=False)[0]
    else:
        out = module(hidden_states=data["x"], timestep=data["t"], encoder_hidden_states=data["text"],
                     pooled_projections=data["pooled"], return_dict=False)[0]
    return (out.float() - data["target"]).pow(2).mean() * (len(rows) / BATCH)
