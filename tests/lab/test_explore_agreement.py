"""The lab's explore/regenerate agreement (solrl_core/lab/explore_agreement.py): each policy's within-prompt Spearman
against the regenerate setting, on the ODE and on Flow-GRPO's SDE, from one calibration batch per rollout kind."""

from __future__ import annotations

import json

from repo_paths import TINY
from solrl_core.lab import explore_agreement as ea


def test_every_policy_is_measured_on_both_rollouts_and_the_table_says_so(tmp_path, one_torch_thread):
    out = tmp_path / "agreement.json"
    assert ea.main([str(TINY), "--prompts", "2", "--seeds", "3", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    for kind in ("ode", "sde"):
        assert set(result[kind]) == {*ea.POLICIES, "reference"}
        assert result[kind]["reference"] == "full precision @ 4"  # TINY's regenerate: fp32, 4 steps
        for label in ea.POLICIES:
            row = result[kind][label]
            assert -1.0 <= row["spearman_within_prompt"] <= 1.0
    assert "| nvfp4 @ 10 (the 4 bits alone; after, for SDE rollouts) |" in ea.format_table(result)
