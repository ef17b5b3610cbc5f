"""`embedded_learned`: the embedded world's learned reward, a small image-text scorer distilled from the programmatic
`embedded` reward (solrl_core/models/embedded/scorer.py). Train on it and evaluate with `eval.gold: embedded` to see what a
learned reward model lets RL get away with."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.rewards.base import ModelReward, RewardModelSpec


class LearnedEmbeddedReward(ModelReward):
    name = "embedded_learned"
    title = "learned (embedded)"
    summary = ("a small image-text scorer distilled from the embedded prompt-match reward (a learned preference "
               "model with its errors), in [0, 1]; use with eval.gold: embedded")
    needs = "its weights: shipped in the package (reproduce with `solrl distill-reward`)"
    source = "solrl_core/models/embedded/scorer/ (or reward_models.embedded_learned.path)"
    spec_keys = frozenset({"path"})
    default_batch_size = 256
    # a 0.2M-parameter CNN gains nothing from half precision, and its scorer adds float32 coordinate channels
    cuda_dtype = "float32"

    @classmethod
    def resolve(cls, spec: RewardModelSpec) -> dict[str, Path]:
        from solrl_core.models.embedded.scorer_files import METADATA_FILE, WEIGHTS_FILE, shipped_dir

        root = Path(spec.path).expanduser() if spec.path else shipped_dir()
        files = {"weights": root / WEIGHTS_FILE, "metadata": root / METADATA_FILE}
        for f in files.values():
            if not f.is_file():
                raise SolrlError(f"reward embedded_learned: missing {f}; run `solrl distill-reward --out DIR` and set "
                                 "reward_models.embedded_learned.path to DIR")
        return files

    def __init__(self, files: dict[str, Path], spec: RewardModelSpec):
        from solrl_core.models.embedded.scorer import load_scorer

        super().__init__(files, spec)
        if self.dtype != "float32":
            raise SolrlError(f"reward_models.embedded_learned.dtype: the learned scorer runs in float32 only (got "
                             f"{self.dtype}; remove the key)")
        self.model = load_scorer(files["weights"].parent).to(self.torch_device)

    def score_batch(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        return self.model.score(images, prompts)  # float64, one read-back
