"""Tiny random-weight diffusers directories of the real architectures (`solrl make-tiny MODEL DIR`), for tests and
for trying the pipeline on a CPU. Each maker writes a directory that `model.path` can point at."""

from __future__ import annotations

import importlib
from pathlib import Path

from solrl_core.errors import SolrlError

# model name -> (model.kind it loads as, "module:function" writing the diffusers directory)
MAKERS: dict[str, tuple[str, str]] = {
    "flux1": ("flux1", "solrl_core.backbones.tiny.flux:make_tiny_flux"),
    "sd35l": ("sd35", "solrl_core.backbones.tiny.sd3:make_tiny_sd35l"),
    "sd35m": ("sd35", "solrl_core.backbones.tiny.sd3:make_tiny_sd35m"),
    "sana": ("sana", "solrl_core.backbones.tiny.sana:make_tiny_sana"),
}


def make_tiny_model(model: str, out_dir: str | Path) -> Path:
    """Write the tiny diffusers directory of `model` into `out_dir` (created) and return it."""
    if model not in MAKERS:
        raise SolrlError(f"unknown model '{model}' (known: {', '.join(MAKERS)})")
    module, _, name = MAKERS[model][1].partition(":")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    getattr(importlib.import_module(module), name)(out)
    return out
