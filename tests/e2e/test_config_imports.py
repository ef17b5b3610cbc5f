"""Config validation is light, in a fresh process: loading and checking a run config, the objective's name
included, imports neither torch nor peft nor diffusers (`solrl config`, `solrl plan` checks and presets stay quick)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from repo_paths import ROOT


@pytest.mark.e2e
@pytest.mark.parametrize("objective, more", [("diffusionnft", ""), ("flow_grpo", ", 'explore.steps=10'")])
def test_loading_a_config_imports_no_torch(objective, more):
    code = ("import sys\nfrom solrl_core.config.loading import load_config\n"
            f"cfg = load_config('configs/demo.yaml', ['objective.name={objective}'{more}])\n"
            "heavy = {'torch', 'peft', 'diffusers'} & {m.split('.')[0] for m in sys.modules}\n"
            "assert not heavy, heavy\nprint(cfg.objective.name)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == objective
