"""Finding and reading reward-model files: config, then environment, then a shared models directory; no network.

Where a file comes from, first match wins:
  1. `reward_models.<reward>.<key>` in the run config (`path`, `processor`, `med_config`, `tokenizer`, `arch`);
  2. the environment variable `SOLRL_<REWARD>_<KEY>` (e.g. SOLRL_PICKSCORE_PATH, SOLRL_IMAGEREWARD_TOKENIZER);
  3. `$SOLRL_REWARD_MODELS_DIR/<default layout>` (e.g. $SOLRL_REWARD_MODELS_DIR/PickScore_v1);
  4. for some keys a default next to another file (e.g. med_config.json beside ImageReward.pt).
`~` and `$VARS` are expanded; relative paths are relative to the working directory.

Nothing is downloaded unless `reward_models.<reward>.allow_download: true` or SOLRL_REWARD_DOWNLOAD=1; then missing
files are fetched from the Hugging Face hub into its cache.
Checkpoints are read with `torch.load(weights_only=True)` (or safetensors): no pickled code runs.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from solrl_core.errors import SolrlError

ENV_ROOT = "SOLRL_REWARD_MODELS_DIR"
ENV_DOWNLOAD = "SOLRL_REWARD_DOWNLOAD"


def env_name(reward: str, key: str) -> str:
    return f"SOLRL_{reward.upper()}_{key.upper()}"


def expand(path: str | os.PathLike) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(str(path))))


def candidate(reward: str, key: str, configured: str | None, default_rel: str | None = None) -> tuple[Path | None, str]:
    """(path to look at, where it was named) for one file of a reward; (None, "") when nothing names one."""
    if configured:
        return expand(configured), f"reward_models.{reward}.{key}"
    env = os.environ.get(env_name(reward, key))
    if env:
        return expand(env), f"${env_name(reward, key)}"
    root = os.environ.get(ENV_ROOT)
    if root and default_rel:
        return expand(root) / default_rel, f"${ENV_ROOT}"
    return None, ""


def missing_error(reward: str, key: str, what: str, path: Path | None, get: str, default_rel: str | None = None) -> SolrlError:
    """One line: which file is missing, where it was looked for, where to get it and how to point solrl at it."""
    how = f"set reward_models.{reward}.{key} (or ${env_name(reward, key)}"
    how += f", or put it at ${ENV_ROOT}/{default_rel})" if default_rel else ")"
    if path is None:
        return SolrlError(f"{reward}: no {what} configured; {get}, then {how}")
    return SolrlError(f"{reward}: no {what} at {path}; {get}, then {how}")


def downloads_allowed(spec) -> bool:
    return bool(getattr(spec, "allow_download", False)) or os.environ.get(ENV_DOWNLOAD, "") in ("1", "true", "yes")


def hub_file(reward: str, repo_id: str, filename: str) -> Path:
    """Download one file of a hub repository (only called when downloads are allowed)."""
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo_id, filename))
    except Exception as exc:  # noqa: BLE001 - any hub failure becomes one user-facing line
        raise SolrlError(f"{reward}: could not download {filename} from {repo_id} ({type(exc).__name__}: {exc})") from None


def hub_dir(reward: str, repo_id: str, patterns: list[str]) -> Path:
    """Download the files of a hub repository that match `patterns` (only called when downloads are allowed)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as exc:  # noqa: BLE001
        raise SolrlError(f"{reward}: could not download {repo_id} ({type(exc).__name__}: {exc})") from None


def load_state_dict(reward: str, path: Path) -> dict:
    """Tensors of a checkpoint file: safetensors, or a torch file read with weights_only=True.

    A {"state_dict": ...} or {"model": ...} wrapper is unwrapped and a DataParallel "module." prefix removed.
    """
    import pickle

    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        obj = load_file(str(path))
    else:
        try:
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc):
                    raise
                obj = torch.load(path, map_location="cpu", weights_only=True)  # legacy (non-zip) format
        except pickle.UnpicklingError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SolrlError(
                f"{reward}: {path} holds Python objects that torch.load(weights_only=True) refuses ({first}); "
                "re-save just its state_dict (torch.save(state_dict, path)) or as safetensors"
            ) from None
        except (RuntimeError, OSError, EOFError) as exc:
            raise SolrlError(f"{reward}: cannot read {path} as a torch checkpoint ({type(exc).__name__}: {exc})") from None
    if isinstance(obj, dict):
        for key in ("state_dict", "model"):
            if isinstance(obj.get(key), dict) and not isinstance(obj.get(key), torch.Tensor):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise SolrlError(f"{reward}: {path} is not a state dict (a mapping of names to tensors)")
    if obj and all(k.startswith("module.") for k in obj):
        obj = {k[len("module."):]: v for k, v in obj.items()}
    return obj


@contextlib.contextmanager
def skip_init():
    """Build modules without running their random initialisation (every weight is loaded afterwards)."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # pragma: no cover - older transformers
        yield
        return
    with no_init_weights():
        yield


def quiet_logs():
    """Silence the loaders' chatter (open_clip's 'no pretrained weights', transformers' config notes)."""
    import logging

    stack = contextlib.ExitStack()
    for name in ("root", "open_clip", "transformers"):
        logger = logging.getLogger() if name == "root" else logging.getLogger(name)
        old = logger.level
        logger.setLevel(logging.ERROR)
        stack.callback(logger.setLevel, old)
    try:
        from transformers.utils import logging as hf_logging

        old_verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        stack.callback(hf_logging.set_verbosity, old_verbosity)
        if hf_logging.is_progress_bar_enabled():
            hf_logging.disable_progress_bar()
            stack.callback(hf_logging.enable_progress_bar)
    except ImportError:  # pragma: no cover
        pass
    return stack
