"""What `solrl calibrate-explore` has measured, kept policy by policy in its output directory (`measured/`), so that a
calibration stopped part way (Ctrl-C, a closed terminal, a crash) resumes at its first policy not measured: each
policy's rewards on the calibration batch, and the seconds they took, in one JSON file written atomically once the
policy is done. A file is used only for the same policy on the same batch (config, prompts, seeds, seed offset, batch
size): anything else measures again."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from solrl_core.run.storage import write_json_atomic

FOLDER = "measured"


def batch_key(cfg, prompts: int, seeds_per_prompt: int, seed_offset: int, batch_size: int) -> dict:
    """What a policy's rewards depend on besides the policy: the config (digested) and the batch."""
    config = hashlib.sha256(json.dumps(cfg.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()
    return {"config": config, "prompts": prompts, "seeds_per_prompt": seeds_per_prompt, "seed_offset": seed_offset,
            "batch_size": batch_size}


class MeasuredRewards:
    """The policies measured in `folder` (None: keep nothing) on the batch `key` (`batch_key`)."""

    def __init__(self, folder: Path | None, key: dict):
        self.folder = None if folder is None else Path(folder) / FOLDER
        self.key = key

    def _path(self, policy) -> Path:
        text = json.dumps({"policy": asdict(policy), "batch": self.key}, sort_keys=True)
        return self.folder / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"

    def get(self, policy) -> tuple[np.ndarray, float] | None:
        """(rewards, seconds) measured before for `policy` on this batch, or None."""
        if self.folder is None:
            return None
        try:
            data = json.loads(self._path(policy).read_text(encoding="utf-8"))
        except (OSError, ValueError):  # not measured, or unreadable: measure it
            return None
        if data.get("policy") != asdict(policy) or data.get("batch") != self.key:
            return None
        return np.asarray(data["rewards"], dtype=np.float64), float(data["seconds"])

    def put(self, policy, rewards: np.ndarray, seconds: float) -> None:
        if self.folder is not None:
            write_json_atomic(self._path(policy), {"policy": asdict(policy), "batch": self.key,
                                                  "rewards": [float(r) for r in rewards], "seconds": seconds})
