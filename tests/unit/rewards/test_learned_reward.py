"""The learned reward (`embedded_learned`, distilled from the programmatic `embedded` reward) and the gold evaluator
(`eval.gold`): what a run trained on a learned reward model reports (the distillation and what the shipped scorer is
worth: tests/lab/test_embedded_distill.py)."""


import numpy as np
import pytest

from repo_paths import ROOT, TINY
from solrl_core.config.loading import load_config
from solrl_core.models.embedded.scorer_files import WEIGHTS_FILE, shipped_dir
from solrl_core.errors import SolrlError
from solrl_core.eval_metrics import evaluation_metrics, seed_blocks
from solrl_core.evaluate import eval_dir, run_eval
from solrl_core.run.pool import read_table
from solrl_core.rewards import get_reward
from solrl_core.rewards.commands import list_rewards
from solrl_core.rewards.embedded import prompt_match_reward
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import prepare_run

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_gold_metrics_are_the_gold_reward_and_the_gap_to_the_total():
    total = np.array([0.9, 0.7])
    per = {"embedded_learned": np.array([0.9, 0.7]), "embedded": np.array([0.5, 0.3])}
    m = evaluation_metrics(total, per, "embedded")
    assert m["gold"] == pytest.approx(0.4) and m["gold_gap"] == pytest.approx(0.8 - 0.4)
    assert m["reward"] == pytest.approx(0.8) and m["embedded_learned"] == pytest.approx(0.8)
    assert "gold" not in evaluation_metrics(total, per, None)


def test_an_evaluation_is_cut_into_blocks_of_every_prompts_jth_seed():
    """Samples are prompt-major (2 prompts x 3 seeds here): block j holds each prompt's j-th seed."""
    total = np.array([0.1, 0.2, 0.3, 0.5, 0.6, 0.7])
    per = {"embedded": total - 0.1}
    blocks = seed_blocks(total, per, "embedded", 3)
    assert blocks["reward"] == pytest.approx([0.3, 0.4, 0.5]) and blocks["gold"] == pytest.approx([0.2, 0.3, 0.4])
    assert np.mean(blocks["reward"]) == pytest.approx(evaluation_metrics(total, per, "embedded")["reward"])
    assert "gold" not in seed_blocks(total, per, None, 3)


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


def test_a_reward_only_the_evaluation_scores_is_released_once_it_has_scored(tmp_path):
    """The gold evaluator (a model) is loaded for each evaluation and forgotten after it, so it holds no device memory
    through the iterations; the training reward stays loaded."""
    cfg = load_config(TINY, ["eval.gold=embedded_learned", "eval.every=1", "eval.num_prompts=1",
                             "eval.seeds_per_prompt=2", "eval.steps=2"])
    run = RunDir(tmp_path / "run")
    prepare_run(run, cfg)
    training, gold = get_reward("embedded"), get_reward("embedded_learned")
    assert get_reward("embedded_learned") is gold  # cached while nothing releases it
    assert "gold" in run_eval(run, cfg, 0)["metrics"]
    assert get_reward("embedded") is training
    assert get_reward("embedded_learned") is not gold


def test_the_learned_demo_trains_on_the_learned_reward_and_evaluates_gold(tmp_path):
    """configs/demo_learned.yaml is the demo with the learned reward trained on and the programmatic one as gold; one
    evaluation of its initial policy reports both (the training itself is the demo's, run in test_pipeline)."""
    cfg = load_config(ROOT / "configs" / "demo_learned.yaml")
    demo = load_config(ROOT / "configs" / "demo.yaml")
    assert cfg.rewards == {"embedded": 0.0, "embedded_learned": 1.0} and cfg.eval.gold == "embedded"
    assert cfg.evaluation_rewards() == {"embedded": 0.0, "embedded_learned": 1.0}
    assert demo.evaluation_rewards() == {"embedded": 1.0, "embedded_learned": 0.0} and demo.eval.gold == "embedded"
    assert cfg.model_dump(exclude={"name", "rewards", "eval"}) == demo.model_dump(exclude={"name", "rewards", "eval"})
