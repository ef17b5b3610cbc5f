"""The embedded model's few-step sibling (solrl_core/lab/embedded_sibling.py, `solrl distill-sibling`): reflow on the
teacher's own pairs lowers the student's error on them, and the directory it writes explores as explore.sibling."""

import json

import pytest
import torch

from solrl_core.lab.embedded_sibling import reflow, teacher_pairs
from solrl_core.models.backbones.embedded import PRETRAINED_DIR, EmbeddedBackbone
from solrl_core.worlds import shapes
from solrl_core.models.embedded.model import METADATA_FILE, load_model, predict_velocity

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]


def _pair_loss(transformer, noise, x0, index, cond):
    """The reflow loss on every pair at t = 1 and t = 0.5 (the 2-step sampler's times)."""
    losses = []
    for t in (1.0, 0.5):
        x_t = (1 - t) * x0 + t * noise
        rows = torch.from_numpy(index)
        with torch.no_grad():
            v = predict_velocity(transformer, x_t, torch.full((len(index),), t), {k: c[rows] for k, c in cond.items()})
        losses.append(torch.nn.functional.mse_loss(v, noise - x0).item())
    return sum(losses)


def test_reflow_straightens_the_teachers_own_paths():
    backbone = EmbeddedBackbone.from_pretrained()
    prompts = shapes.train_prompts()[:8]
    noise, x0, index = teacher_pairs(backbone, prompts, 4, 4, progress=False)
    assert x0.shape == noise.shape == (32, 3, 32, 32)
    cond = backbone.encode_prompts(prompts)
    student, curve = reflow(backbone, noise, x0, index, cond, steps=60, batch_size=16, lr=3e-4, seed=0,
                            progress=False)
    before, after = _pair_loss(backbone.transformer, noise, x0, index, cond), _pair_loss(student, noise, x0, index,
                                                                                         cond)
    assert after < 0.9 * before, (before, after)
    assert curve and curve[-1][0] == 60


def test_distill_sibling_writes_a_model_directory_to_explore_with(tmp_path, capsys):
    from solrl.cli.main import main

    out = tmp_path / "sibling"
    assert main(["distill-sibling", "--out", str(out), "--steps", "5", "--seeds-per-prompt", "1", "--quiet"]) == 0
    assert f"--sibling {out}" in capsys.readouterr().out
    sibling = load_model(out)
    meta = json.loads((out / METADATA_FILE).read_text())["sibling"]
    assert meta["pairs"] == len(shapes.train_prompts()) and meta["recipe"]["steps"] == 5
    assert {"student@1", "student@2", "student@4", "teacher@4"} <= set(meta["held_out_seeds"])
    shipped = load_model(PRETRAINED_DIR)
    # the teacher's text encoder, a trained transformer of the same shapes
    assert all(torch.equal(a, b) for a, b in zip(sibling.text_encoder.parameters(), shipped.text_encoder.parameters()))
    pairs = list(zip(sibling.transformer.parameters(), shipped.transformer.parameters()))
    assert all(a.shape == b.shape for a, b in pairs) and not all(torch.equal(a, b) for a, b in pairs)
