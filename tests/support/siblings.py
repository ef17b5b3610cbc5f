"""Embedded sibling models for the explore.sibling tests: directories of the embedded model's format."""

from __future__ import annotations

from pathlib import Path

import torch

from solrl_core.models.backbones.embedded import PRETRAINED_DIR
from solrl_core.models.embedded.model import EmbeddedModel, load_model, transformer_config


def write_shallow_sibling(out: str | Path, num_layers: int = 1, seed: int = 1) -> str:
    """A smaller sibling: a random transformer of `num_layers` blocks beside the shipped text encoder and tokenizer."""
    from diffusers import SD3Transformer2DModel

    shipped = load_model(PRETRAINED_DIR)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        transformer = SD3Transformer2DModel(**{**transformer_config(32), "num_layers": num_layers})
    EmbeddedModel(transformer, shipped.text_encoder, shipped.tokenizer, 32).save(out)
    return str(out)


def write_perturbed_sibling(out: str | Path, scale: float = 0.01, seed: int = 0) -> str:
    """A sibling of the same architecture: the shipped weights moved by seeded Gaussian noise of std `scale`."""
    shipped = load_model(PRETRAINED_DIR)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in shipped.transformer.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    EmbeddedModel(shipped.transformer, shipped.text_encoder, shipped.tokenizer, 32).save(out)
    return str(out)
