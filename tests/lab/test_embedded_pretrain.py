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


def test_the_motion_world_pretrains_a_video_model(tmp_path):
    """`solrl pretrain --world motion`: the video model, trained on rendered videos of the motion prompts, saved with
    its frames and loaded by its adapter; an unknown world is one line."""
    from solrl_core.errors import SolrlError
    from solrl_core.lab.embedded_pretrain import MOTION_STEPS, pretrain, world
    from solrl_core.models.backbones.embedded_video import EmbeddedVideoBackbone
    from solrl_core.worlds import motion

    summary = pretrain(tmp_path / "video", steps=2, batch_size=4, progress=False, log_every=1, evaluate_samples=False,
                       threads=1, world_name="motion")
    assert summary["world"] == "motion" and np.isfinite(summary["final_loss"])
    backbone = EmbeddedVideoBackbone.from_pretrained(tmp_path / "video")
    assert backbone.frames == motion.FRAMES and backbone.latent_shape == (3, motion.FRAMES, 32, 32)
    assert world("motion").steps == MOTION_STEPS and world("motion").train_prompts() == motion.train_prompts()
    with pytest.raises(SolrlError, match=r"unknown world 'clouds' \(known: shapes, motion, edits\)"):
        pretrain(tmp_path / "x", steps=1, world_name="clouds")


def test_the_edits_world_fine_tunes_the_image_model_into_an_editing_one(tmp_path):
    """`solrl pretrain --world edits`: the editing model, started from the shipped image model, trained on the
    editing world's (source, target) pairs of the training edits, saved as an editing model its adapter loads, and
    its samples scored against their sources."""
    from solrl_core.lab.embedded_pretrain import EDIT_LR, EDIT_STEPS, pretrain, sample_rewards, world
    from solrl_core.models.backbones.embedded_edit import EmbeddedEditBackbone
    from solrl_core.worlds import edits

    summary = pretrain(tmp_path / "edit", steps=2, batch_size=4, progress=False, log_every=1, evaluate_samples=False,
                       threads=1, world_name="edits")
    assert (summary["world"], summary["lr"]) == ("edits", EDIT_LR) and np.isfinite(summary["final_loss"])
    model = load_model(tmp_path / "edit")
    assert EmbeddedEditBackbone(model).edits and world("edits").steps == EDIT_STEPS
    assert world("edits").train_prompts() == [edit.prompt for edit in edits.train_edits()]
    prompts = [edit.prompt for edit in edits.test_edits()[:3]]
    images, rewards = sample_rewards(model, prompts, [0, 1], steps=2, world_name="edits")
    assert images.shape == (6, 32, 32, 3) and rewards.shape == (3, 2) and np.all((rewards >= 0) & (rewards <= 1))
