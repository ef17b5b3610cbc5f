"""`solrl rewards list` and `solrl rewards check` on tiny checkpoints written in the official layouts."""

import yaml

from repo_paths import TINY
from solrl_core.rewards.tiny import write_tiny_checkpoints

ALL = ("pickscore", "clipscore", "hpsv2", "imagereward", "jpeg")


def test_rewards_list_names_the_registered_rewards(run_cli):
    out = run_cli("rewards", "list").stdout
    for name in ALL + ("embedded",):
        assert name in out


def test_rewards_check_scores_each_tiny_checkpoint(run_cli, tmp_path):
    models = write_tiny_checkpoints(tmp_path / "tiny")
    config = tmp_path / "rewards.yaml"
    config.write_text(yaml.safe_dump({
        "extends": str(TINY),
        "rewards": {"embedded": 1.0, "pickscore": 0.0, "clipscore": 0.0, "hpsv2": 0.0, "imagereward": 0.0,
                    "jpeg": 0.0},
        "reward_models": models,
    }))
    proc = run_cli("rewards", "check", "--config", str(config), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ALL:
        assert name in proc.stdout
    # a missing weights file makes the check fail, naming the file
    models["pickscore"]["path"] = str(tmp_path / "nowhere")
    config.write_text(yaml.safe_dump({"extends": str(TINY), "rewards": {"pickscore": 1.0}, "reward_models": models}))
    proc = run_cli("rewards", "check", "--config", str(config), check=False)
    assert proc.returncode == 1 and "nowhere" in proc.stdout
