"""`solrl eval` scores with all four evaluation rewards of the method when their files are given (tiny checkpoints in
the official layouts)."""

import json

import numpy as np
import pytest

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.evaluate import eval_dir
from solrl_core.run.pool import read_table
from solrl_core.rewards import get_reward
from solrl_core.rewards.tiny import write_tiny_checkpoints
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import prepare_run

FOUR = ("pickscore", "clipscore", "hpsv2", "imagereward")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_eval_scores_with_pickscore_clipscore_hpsv2_and_imagereward(tmp_path, run_cli):
    cfg = load_config(TINY, ["eval.num_prompts=2", "eval.seeds_per_prompt=2", "eval.steps=2"])
    cfg.eval.rewards = {"pickscore": 1.0, "clipscore": 0.5, "hpsv2": 2.0, "imagereward": 0.25}
    cfg.reward_models = write_tiny_checkpoints(tmp_path / "tiny")
    run = RunDir(tmp_path / "run")
    prepare_run(run, cfg)
    out = run_cli("eval", "--run-dir", str(run.root), "--step", "0").stdout
    stored = json.loads((run.root / "eval" / "step_0000" / "metrics.json").read_text())["metrics"]
    assert set(stored) == {"reward", *FOUR} and all(np.isfinite(v) for v in stored.values())
    for name in FOUR:
        assert f"eval/{name}" in out
    # each is that reward's mean over the evaluation samples (kept in pool.zarr), "reward" the weighted one
    metrics = stored
    cols, attrs = read_table(eval_dir(run, 0) / "pool.zarr", ["image", "prompt_index"])
    prompts = [attrs["prompts"][i] for i in cols["prompt_index"]]
    assert len(prompts) == 4
    per = {name: get_reward(name, cfg.reward_models)(cols["image"], prompts) for name in FOUR}
    for name in FOUR:
        assert np.isclose(metrics[name], per[name].mean(), rtol=0, atol=1e-6), name
    weighted = sum(cfg.eval.rewards[n] * per[n] for n in FOUR)
    assert np.isclose(metrics["reward"], weighted.mean(), rtol=0, atol=1e-6)
