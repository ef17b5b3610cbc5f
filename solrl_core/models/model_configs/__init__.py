"""Where the full-size transformer configs are: in this package (see README.md here), or where the user says."""

from __future__ import annotations

import os
from pathlib import Path

from solrl_core.errors import SolrlError

CONFIG_DIR_ENV = "SOLRL_MODEL_CONFIGS"
PACKAGE_CONFIG_DIR = Path(__file__).resolve().parent


def config_dir(path: str | Path | None = None) -> Path:
    """The directory of the diffusers transformer configs: ``path``, else $SOLRL_MODEL_CONFIGS, else the configs
    shipped in the package (``PACKAGE_CONFIG_DIR``). SolrlError (one line) when the chosen one is missing."""
    chosen = Path(path or os.environ.get(CONFIG_DIR_ENV) or PACKAGE_CONFIG_DIR)
    if not chosen.is_dir():
        raise SolrlError(f"model config directory not found: {chosen} (set {CONFIG_DIR_ENV} or pass config_dir)")
    return chosen
