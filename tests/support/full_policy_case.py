"""The cases the full-policy tests train: the embedded image transformer at two layers, the tiny FLUX.1 of
`solrl make-tiny flux1` (one double and one single block), or the tiny Wan2.2-T2V-A14B of `solrl make-tiny wan22` (its
two experts as the one module the wan22 adapter trains, solrl_core/models/experts.py), with random weights (seeded),
and a fixed batch whose rows a rank's share of the loss is computed over (weighted by the share, so the ranks'
gradients sum to the whole batch's)."""

from __future__ import annotations

import torch

BATCH = 4
MODELS = ("embedded", "flux1", "wan22")
# wan22's timesteps (boundary 875): rows 0-1 the high-noise expert's (875 on the boundary, which is the high-noise
# expert's, as WanPipeline's t >= boundary), rows 2-3 the low-noise expert's: over 2 ranks each rank runs one expert
# alone, over one process the batch spans both
WAN22_TIMESTEPS = (990.0, 875.0, 600.0, 300.0)


def output_weights(model: str = "embedded") -> list[str]:
    """The output projection of each of the case's transformers (every expert's): a weight every row reaches."""
    if model == "wan22":
        from solrl_core.models.backbones.specs.wan22 import EXPERTS

        return [f"{expert}.proj_out.weight" for expert in EXPERTS]
    return ["proj_out.weight"]


def tiny_transformer(model: str = "embedded") -> torch.nn.Module:
    if model == "flux1":
        from solrl_core.models.backbones.tiny.flux import tiny_transformer as tiny_flux

        return tiny_flux()
    if model == "wan22":  # as the wan22 adapter joins the pipeline's transformer and transformer_2
        from solrl_core.models.backbones.specs.wan22 import EXPERTS
        from solrl_core.models.backbones.tiny.wan import BOUNDARY_RATIO, SCHEDULER_CONFIG, SEED
        from solrl_core.models.backbones.tiny.wan import tiny_transformer as tiny_wan
        from solrl_core.models.experts import TimestepExperts

        boundary = BOUNDARY_RATIO * SCHEDULER_CONFIG["num_train_timesteps"]
        return TimestepExperts(list(zip(EXPERTS, (tiny_wan(SEED), tiny_wan(SEED + 3)))), [boundary])
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
    if model == "wan22":
        from solrl_core.models.backbones.tiny.wan import LATENT_CHANNELS, TEXT_WIDTH

        latents = (BATCH, LATENT_CHANNELS, 2, 4, 4)  # 2 latent frames of 4 x 4: 8 patches of 1 x 2 x 2
        return {"x": torch.randn(*latents, generator=g), "t": torch.tensor(WAN22_TIMESTEPS),
                "text": torch.randn(BATCH, 6, TEXT_WIDTH, generator=g),
                "target": torch.randn(*latents, generator=g)}
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
    elif model == "wan22":  # as the adapter calls it (scheduler_time_velocity): timesteps on the 0..1000 scale
        out = module(hidden_states=data["x"], timestep=data["t"], encoder_hidden_states=data["text"],
                     return_dict=False)[0]
    else:
        out = module(hidden_states=data["x"], timestep=data["t"], encoder_hidden_states=data["text"],
                     pooled_projections=data["pooled"], return_dict=False)[0]
    return (out.float() - data["target"]).pow(2).mean() * (len(rows) / BATCH)
