"""Distilling the learned reward (solrl_core/lab/embedded_distill.py, `solrl distill-reward`): its data, what the
shipped scorer is worth against the programmatic `embedded` reward it was distilled from, and a small distillation
the reward loads. The learned reward as a reward and the gold evaluator: tests/unit/rewards/test_learned_reward.py."""

import json

import numpy as np
import pytest

from solrl_core.worlds import shapes
from solrl_core.lab.embedded_distill import DEFAULT_RECIPE, agreement, build_dataset, distill
from solrl_core.models.embedded.scorer import load_scorer
from solrl_core.models.embedded.scorer_files import METADATA_FILE, shipped_dir
from solrl_core.rewards import get_reward
from solrl_core.rewards.registry import score_images

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]


def test_the_shipped_scorer_agrees_with_gold_on_held_out_prompts():
    """Fresh samples of the pretrained model and renders for prompts the scorer never saw, scored for their own and
    for other prompts: the learned reward follows gold overall and ranks one prompt's seeds mostly as gold does."""
    test = build_dataset(shapes.test_prompts()[::3], dict(DEFAULT_RECIPE, seeds_per_prompt=8, sample_steps=(6,)),
                         seed=123, progress=False)
    got = agreement(get_reward("embedded_learned")(test.images, test.prompts), test)
    assert got["pearson"] > 0.85, got
    assert got["spearman_within_prompt"] > 0.25, got  # 8 seeds a prompt: a noisy rank correlation
    # what scorer.json claims was measured the same way
    meta = json.loads((shipped_dir() / METADATA_FILE).read_text())
    assert meta["agreement_held_out"]["pearson"] > 0.85
    # a matching render outscores the same render under another colour's prompt
    rng = np.random.default_rng(0)
    image = shapes.render_batch(["a red circle"], rng)
    learned = get_reward("embedded_learned")(np.concatenate([image, image]), ["a red circle", "a blue circle"])
    assert learned[0] > learned[1] + 0.3


def test_distill_writes_a_scorer_the_reward_loads_and_that_learned_something(tmp_path):
    recipe = dict(seeds_per_prompt=2, sample_steps=(4,), renders_per_prompt=4, foreign_per_prompt=6, epochs=4)
    summary = distill(tmp_path / "scorer", recipe, progress=False, threads=1)
    assert summary["recipe"]["epochs"] == 4 and summary["train_images"] == len(shapes.train_prompts()) * 12
    assert len(summary["loss_curve"]) == 4 and summary["loss_curve"][-1][1] < summary["loss_curve"][0][1]
    models = {"embedded_learned": {"path": str(tmp_path / "scorer")}}
    images = shapes.render_batch(["a red circle", "two blue squares"], np.random.default_rng(1))
    total, per = score_images(images, ["a red circle", "two blue squares"], {"embedded_learned": 1.0}, models)
    assert np.all((total >= 0) & (total <= 1))
    direct = load_scorer(tmp_path / "scorer").score(images, ["a red circle", "two blue squares"])
    np.testing.assert_allclose(per["embedded_learned"], direct, rtol=0, atol=1e-12)
