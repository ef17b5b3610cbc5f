"""`solrl rewards list` / `solrl rewards check` as functions, on tiny checkpoints of every architecture."""

import numpy as np
import pytest
import torch
import yaml

from solrl_core.rewards.commands import check_rewards, format_table, list_rewards
from solrl_core.rewards.registry import REWARDS
from solrl_core.rewards.tiny import write_tiny_checkpoints


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return root, write_tiny_checkpoints(root)


def test_tiny_checkpoints_are_in_the_official_layouts(tiny):
    root, specs = tiny
    # every reward with weight files but the one whose weights ship in the package
    assert set(specs) == {name for name, cls in REWARDS.items() if cls.needs_weights} - {"embedded_learned"}
    assert specs["clip_edit"] == specs["clipscore"]  # the same CLIP, scoring edits
    assert specs["flow_smoothness"] == specs["flow_motion"]  # the same RAFT
    raft = torch.load(specs["flow_motion"]["path"], weights_only=True)
    assert "feature_encoder.convnormrelu.0.weight" in raft and specs["flow_motion"]["path"].endswith(
        "raft_small_C_T_V2-01064c6d.pth")
    for name in ("PickScore_v1", "clip-vit-large-patch14"):
        files = {p.name for p in (root / name).iterdir()}
        assert {"config.json", "model.safetensors", "preprocessor_config.json", "tokenizer.json"} <= files
    hps = torch.load(specs["hpsv2"]["path"], weights_only=True)
    assert set(hps) == {"state_dict"} and "visual.conv1.weight" in hps["state_dict"]
    ir = torch.load(specs["imagereward"]["path"], weights_only=True)
    assert {"blip.visual_encoder.cls_token", "blip.text_encoder.embeddings.word_embeddings.weight", "mlp.layers.7.weight"} <= set(ir)
    assert yaml.safe_load((root / "reward_models.yaml").read_text()) == {"reward_models": specs}


def test_list_rewards(tiny, monkeypatch):
    _, specs = tiny
    monkeypatch.delenv("SOLRL_REWARD_MODELS_DIR", raising=False)
    rows = {r["name"]: r for r in list_rewards(specs)}
    assert {"pickscore", "clipscore", "hpsv2", "imagereward", "jpeg", "embedded"} <= set(rows)
    assert all(rows[n]["weights"] == "found" for n in specs)
    assert rows["jpeg"]["weights"] == "not needed" and rows["jpeg"]["found"] is None
    assert rows["imagereward"]["files"]["tokenizer"].endswith("bert-base-uncased")
    bare = {r["name"]: r for r in list_rewards()}
    assert bare["pickscore"]["weights"] == "missing" and "yuvalkirstain/PickScore_v1" in bare["pickscore"]["error"]
    table = format_table(list(rows.values()), ["name", "weights", "source"])
    assert table.splitlines()[0].split() == ["name", "weights", "source"] and "hpsv2" in table


def test_check_rewards_scores_a_sample_with_every_architecture(tiny, tmp_path):
    _, specs = tiny
    weights = {"pickscore": 1.0, "clipscore": 1.0, "hpsv2": 1.0, "imagereward": 1.0, "jpeg": 0.0, "embedded": 0.0}
    rows = {r["name"]: r for r in check_rewards(weights, specs)}
    assert list(rows) == list(weights)
    for name, row in rows.items():
        assert row["ok"], row
        assert len(row["scores"]) == 4 and np.all(np.isfinite(row["scores"])) and row["error"] is None
        assert (row["found"] is None) == (name in ("jpeg", "embedded"))
    assert rows["embedded"]["mean"] > 0.5  # the sample batch renders its own prompts
    # deterministic: the same sample batch scores the same
    again = {r["name"]: r for r in check_rewards({"hpsv2": 1.0}, specs)}
    assert again["hpsv2"]["scores"] == rows["hpsv2"]["scores"]
    # a reward whose files are missing reports it in its row; the others still run
    broken = {**specs, "imagereward": {**specs["imagereward"], "path": str(tmp_path / "gone.pt")}}
    rows = {r["name"]: r for r in check_rewards({"imagereward": 1.0, "jpeg": 1.0, "nope": 1.0}, broken)}
    assert not rows["imagereward"]["ok"] and rows["imagereward"]["found"] is False
    assert "gone.pt" in rows["imagereward"]["error"] and "THUDM/ImageReward" in rows["imagereward"]["error"]
    assert rows["jpeg"]["ok"] and not rows["nope"]["ok"] and "unknown reward" in rows["nope"]["error"]
    text = format_table(list(rows.values()), ["name", "ok", "mean", "error"])
    assert "gone.pt" in text
