"""`solrl plan CONFIG` as a command: the JSON and the table of a config's plan, and an unknown family refused
(the plan itself: tests/unit/planner/test_plan_config.py)."""

from __future__ import annotations

import json



def test_plan_cli_with_a_config(run_cli):
    out = run_cli("plan", "configs/demo.yaml", "--gpu", "h100", "--gpus", "1", "--model", "sd35l", "--json")
    result = json.loads(out.stdout)
    assert result["config"] == "demo" and result["model"] == "sd35l"
    assert result["families"]["sol_rl"]["explore_precision"] == "fp8"  # H100 has no NVFP4: auto falls back
    text = run_cli("plan", "configs/demo.yaml", "--gpu", "b200", "--family", "sol_rl").stdout
    assert "| sol_rl (this config) |" in text and "| naive_scaling |" not in text
    bad = run_cli("plan", "configs/demo.yaml", "--gpu", "b200", "--family", "sol", check=False)
    assert bad.returncode != 0 and "unknown family 'sol'" in bad.stderr
