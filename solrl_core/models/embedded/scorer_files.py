"""Where the learned embedded scorer's files are and what they are called: read without importing torch, so that
`solrl rewards list` and a reward's file check stay light (solrl_core/models/embedded/scorer.py is the model itself)."""

from __future__ import annotations

from pathlib import Path

WEIGHTS_FILE = "model.safetensors"
METADATA_FILE = "scorer.json"


def shipped_dir() -> Path:
    """The scorer shipped with the package (reproduced by `solrl distill-reward --out DIR`)."""
    return Path(__file__).parent / "scorer"
