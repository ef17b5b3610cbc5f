"""The learned reward (`embedded_learned`, distilled from the programmatic `embedded` reward) and the gold evaluator
(`eval.gold`): what a run trained on a learned reward model reports, and what the shipped scorer is worth."""

import json

import numpy as np
import pytest

from conftest import ROOT, TINY
from solrl_core.config.loading import load_config
from solrl_core.models.embedded import shapes
from solrl_core.lab.embedded_distill import DEFAULT_RECIPE, agreement, build_dataset, distill
from solrl_core.models.embedded.scorer import load_scorer
from solrl_core.models.embedded.scorer_files import METADATA_FILE, WEIGHTS_FILE, shipped_dir
from solrl_core.errors import SolrlError
from solrl_core.eval_metrics import evaluation_metrics
from solrl_core.evaluate import eval_dir, run_eval
from solrl_core.run.pool import read_table
from solrl_core.rewards import get_reward
from solrl_core.rewards.commands import list_rewards
from solrl_core.rewards.embedded import prompt_match_reward
from solrl_core.rewards.registry import score_images
from solrl_core.run.rundir import RunDir
from solrl_core.runs import prepare_run

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_gold_metrics_are_the_gold_reward_and_the_gap_to_the_total():
    total = np.array([0.9, 0.7])
    per = {"embedded_learned": np.array([0.9, 0.7]), "embedded": np.array([0.5, 0.3])}
    m = evaluation_metrics(total, per, "embedded")
    assert m["gold"] == pytest.approx(0.4) and m["gold_gap"] == pytest.approx(0.8 - 0.4)
    assert m["reward"] == pytest.approx(0.8) and m["embedded_learned"] == pytest.approx(0.8)
    assert "gold" not in evaluation_metrics(total, per, None)


def test_gold_is_scored_at_weight_zero_beside_the_evaluation_rewards():
    cfg = load_config(TINY, ["rewards={embedded_learned: 1.0}", "eval.gold=embedded"])
    assert cfg.evaluation_rewards() == {"embedded_learned": 1.0, "embedded": 0.0}
    cfg = load_config(TINY, ["rewards={embedded: 1.0}", "eval.gold=embedded"])
    assert cfg.evaluation_rewards() == {"embedded": 1.0}  # gold is a trained-on reward: scored once
    cfg = load_config(TINY, ["eval.rewards={jpeg: 1.0}", "eval.gold=embedded_learned"])
    assert cfg.evaluation_rewards() == {"jpeg": 1.0, "embedded_learned": 0.0}


def test_an_unknown_gold_reward_is_one_line_naming_the_key():
    with pytest.raises(SolrlError) as err:
        load_config(TINY, ["eval.gold=goldd"])
    assert "eval.gold" in str(err.value) and "unknown reward 'goldd'" in str(err.value)
    assert "\n" not in str(err.value)


def test_the_learned_reward_is_registered_and_its_shipped_files_are_found():
    row = next(r for r in list_rewards() if r["name"] == "embedded_learned")
    assert row["found"] is True and row["weights"] == "found"
    assert (shipped_dir() / WEIGHTS_FILE).stat().st_size < 20e6


def test_a_missing_scorer_names_the_command_that_makes_one(tmp_path):
    with pytest.raises(SolrlError, match="solrl distill-reward"):
        get_reward("embedded_learned", {"embedded_learned": {"path": str(tmp_path)}})


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


def test_an_evaluation_with_a_gold_evaluator_stores_gold_and_the_gap(tmp_path):
    cfg = load_config(TINY, ["rewards={embedded_learned: 1.0}", "eval.gold=embedded", "eval.every=1",
                             "eval.num_prompts=2", "eval.seeds_per_prompt=2", "eval.steps=2"])
    run = RunDir(tmp_path / "run")
    prepare_run(run, cfg)
    metrics = run_eval(run, cfg, 0)["metrics"]
    assert set(metrics) == {"reward", "embedded_learned", "embedded", "gold", "gold_gap"}
    cols, attrs = read_table(eval_dir(run, 0) / "pool.zarr", ["image", "prompt_index"])
    prompts = [attrs["prompts"][i] for i in cols["prompt_index"]]
    gold = prompt_match_reward(cols["image"], prompts)["reward"].mean()
    learned = get_reward("embedded_learned")(cols["image"], prompts).mean()
    assert metrics["gold"] == pytest.approx(gold, abs=1e-6)  # scores pass through float32 columns
    assert metrics["reward"] == pytest.approx(learned, abs=1e-6)  # gold has weight 0: not in the total
    assert metrics["gold_gap"] == pytest.approx(learned - gold, abs=1e-6)


def test_the_learned_demo_trains_on_the_learned_reward_and_evaluates_gold(tmp_path):
    """configs/demo_learned.yaml is the demo with the learned reward trained on and the programmatic one as gold; one
    evaluation of its initial policy reports both (the training itself is the demo's, run in test_pipeline)."""
    cfg = load_config(ROOT / "configs" / "demo_learned.yaml")
    demo = load_config(ROOT / "configs" / "demo.yaml")
    assert cfg.rewards == {"embedded": 0.0, "embedded_learned": 1.0} and cfg.eval.gold == "embedded"
    assert cfg.evaluation_rewards() == {"embedded": 0.0, "embedded_learned": 1.0}
    assert demo.evaluation_rewards() == {"embedded": 1.0, "embedded_learned": 0.0} and demo.eval.gold == "embedded"
    assert cfg.model_dump(exclude={"name", "rewards", "eval"}) == demo.model_dump(exclude={"name", "rewards", "eval"})
