"""The learned reward of the embedded world: a small image-text scorer distilled from the programmatic reward
(`solrl_core/rewards/embedded.py`, which stays the *gold* evaluator); `embedded_learned` scores with it
(solrl_core/rewards/learned.py). How it is trained: solrl_core/lab/embedded_distill.py (`solrl distill-reward`).

Model (`PromptImageScorer`): the prompt as the bag of its words (the grammar's vocabulary) -> an embedding that scales
and shifts (FiLM) every stage of a small CNN over the 32x32 image; one output in [0, 1] (a sigmoid).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from solrl_core.models.embedded.model import images_to_latents
from solrl_core.models.embedded.scorer_files import METADATA_FILE, WEIGHTS_FILE, shipped_dir
from solrl_core.errors import SolrlError

FORMAT = "solrl-embedded-scorer"
TEXT_WIDTH = 64


class PromptImageScorer(nn.Module):
    """Score in [0, 1] of images (B, 3, 32, 32) in [-1, 1] for prompts given as bag-of-words (B, V). The CNN sees two
    more input channels, the pixel coordinates (so "on the left" is a feature, not a pattern to discover); `widths`:
    its channels at 32x32, 16x16 and 8x8."""

    def __init__(self, vocabulary: list[str], widths: tuple[int, ...]):
        super().__init__()
        self.vocabulary, self.widths = list(vocabulary), tuple(widths)
        self.text = nn.Sequential(nn.Linear(len(vocabulary), TEXT_WIDTH), nn.GELU(), nn.Linear(TEXT_WIDTH, TEXT_WIDTH))
        convs, films, width_in = [], [], 5
        for width in self.widths:
            convs.append(nn.ModuleList([nn.Conv2d(width_in, width, 3, padding=1), nn.Conv2d(width, width, 3, padding=1)]))
            films.append(nn.Linear(TEXT_WIDTH, 2 * width))
            width_in = width
        self.convs, self.films = nn.ModuleList(convs), nn.ModuleList(films)
        self.head = nn.Sequential(nn.Linear(self.widths[-1] * 4 * 4 + TEXT_WIDTH, 128), nn.GELU(), nn.Linear(128, 1))

    def words(self, prompts: list[str]) -> torch.Tensor:
        """(B, V) multi-hot of each prompt's words (words outside the vocabulary are ignored)."""
        index = {w: i for i, w in enumerate(self.vocabulary)}
        out = torch.zeros(len(prompts), len(self.vocabulary))
        for row, prompt in enumerate(prompts):
            for word in str(prompt).lower().split():
                if word in index:
                    out[row, index[word]] = 1.0
        return out

    def logits(self, images: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
        text = self.text(words)
        side = torch.linspace(-1, 1, images.shape[-1], device=images.device)
        ys, xs = torch.meshgrid(side, side, indexing="ij")
        x = torch.cat([images, torch.stack([xs, ys]).expand(len(images), 2, -1, -1)], dim=1)
        for (conv_a, conv_b), film in zip(self.convs, self.films):
            x = nn.functional.gelu(conv_a(x))
            scale, shift = film(text).unsqueeze(-1).unsqueeze(-1).chunk(2, dim=1)
            x = nn.functional.gelu(conv_b(x) * (1 + scale) + shift)
            x = nn.functional.avg_pool2d(x, 2)
        return self.head(torch.cat([x.flatten(1), text], dim=1)).squeeze(1)

    @torch.no_grad()
    def score(self, images_u8: np.ndarray, prompts: list[str]) -> np.ndarray:
        """float64 scores (B,) of uint8 images (B, 32, 32, 3)."""
        device = next(self.parameters()).device
        x = images_to_latents(images_u8).to(device)
        return torch.sigmoid(self.logits(x, self.words(prompts).to(device))).double().cpu().numpy()


def load_scorer(path: str | Path | None = None) -> PromptImageScorer:
    """A saved scorer directory (default: the shipped one); SolrlError naming a missing or foreign file."""
    root = Path(path) if path is not None else shipped_dir()
    meta_path, weights_path = root / METADATA_FILE, root / WEIGHTS_FILE
    for f in (meta_path, weights_path):
        if not f.is_file():
            raise SolrlError(f"learned reward: missing {f}; run `solrl distill-reward --out DIR` or fix its path")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != FORMAT:
        raise SolrlError(f"learned reward: {meta_path} is not a {FORMAT} file")
    model = PromptImageScorer(meta["vocabulary"], meta["recipe"]["widths"])
    model.load_state_dict(load_file(weights_path))
    return model.eval()


# ------------------------------------------------------------------------------------------------------ data
