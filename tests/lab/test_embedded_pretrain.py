"""Pretraining the embedded model (solrl_core/lab/embedded_pretrain.py, `solrl pretrain`): a few steps, reproducible
from the seed."""

import numpy as np
import pytest
import torch

from solrl_core.models.embedded.model import load_model


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest: 2 spinning OpenMP threads stall on a busy machine


def test_pretraining_is_reproducible_from_the_seed(tmp_path):
    from safetensors.torch import load_file

    from solrl_core.lab.embedded_pretrain import pretrain

    runs = []
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        summary = pretrain(
            tmp_path / name, steps=2, batch_size=4, seed=seed, progress=False, log_every=1, evaluate_samples=False,
            threads=1,
        )
        assert summary["steps"] == 2 and np.isfinite(summary["final_loss"])
        runs.append(load_file(tmp_path / name / "transformer" / "diffusion_pytorch_model.safetensors"))
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])
    assert not all(torch.equal(runs[0][k], runs[2][k]) for k in runs[0])
    assert load_model(tmp_path / "a").metadata["pretraining"]["seed"] == 3
