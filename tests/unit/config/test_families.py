"""`family` is checked against what the config does (solrl_core/config/families.py): a contradiction is one line naming
the conflicting key and the fix."""

from __future__ import annotations


import pytest

from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError
from solrl_core.config.families import FAMILIES, family_conflict
from repo_paths import ROOT

FAMILY_DIR = ROOT / "configs" / "families"


def _load(family: str, *overrides: str):
    return load_config(FAMILY_DIR / f"{family}.yaml", list(overrides))


@pytest.mark.parametrize("family", FAMILIES)
def test_shipped_family_configs_and_their_official_parts_agree(family):
    cfg = _load(family)
    assert cfg.family == family and family_conflict(cfg) is None
    official = load_config(ROOT / "configs" / "presets" / f"sd35l_{family}_pickscore.yaml")
    assert official.family == family and family_conflict(official) is None


@pytest.mark.parametrize("family,overrides,key,fix", [
    ("sol_rl", ["regenerate.enabled=false"], "regenerate.enabled", "set regenerate.enabled: true"),
    ("sol_rl", ["select.mode=all"], "select.mode", "set select.mode: best_worst"),
    ("sol_rl", ["explore.precision=fp32", "explore.steps=10"], "explore.precision", "set explore.precision: auto"),
    ("sol_rl", ["explore.precision=bf16", "explore.steps=12"], "explore.precision", "set explore.precision: auto"),
    ("naive_quant", ["explore.precision=fp32"], "explore.precision", "set explore.precision: auto"),
    ("naive_quant", ["regenerate.enabled=true"], "regenerate.enabled", "set regenerate.enabled: false"),
    ("naive_quant", ["select.mode=all"], "select.mode", "set select.mode: best_worst"),
    ("naive_scaling", ["explore.precision=nvfp4_emulated"], "explore.precision", "set explore.precision: fp32"),
    ("naive_scaling", ["regenerate.enabled=true"], "regenerate.enabled", "set regenerate.enabled: false"),
    ("naive_scaling", ["select.mode=all"], "select.mode", "(or family: baseline)"),
    ("baseline", ["select.mode=best_worst"], "select.mode", "set select.mode: all"),
    ("baseline", ["explore.precision=auto"], "explore.precision", "set explore.precision: fp32"),
    ("baseline", ["regenerate.enabled=true"], "regenerate.enabled", "set regenerate.enabled: false"),
])
def test_a_setting_that_contradicts_the_family_is_refused(family, overrides, key, fix):
    with pytest.raises(ConfigError) as info:
        _load(family, *overrides)
    message = str(info.value)
    assert "\n" not in message and f"family {family}: {key} is " in message and fix in message, message


def test_changing_family_with_its_settings_is_accepted():
    cfg = _load("sol_rl", "family=naive_quant", "regenerate.enabled=false")
    assert cfg.family == "naive_quant" and family_conflict(cfg) is None
    cfg = _load("naive_scaling", "family=baseline", "select.mode=all")
    assert family_conflict(cfg) is None


def test_sol_rl_may_explore_at_full_precision_with_fewer_steps_than_the_regenerate():
    """The few-step proxy (the CPU tests use it): cheaper than the regenerate by steps, not by precision."""
    cfg = _load("sol_rl", "explore.precision=fp32", "explore.steps=3", "regenerate.steps=4")
    assert family_conflict(cfg) is None
    with pytest.raises(ConfigError, match=r"explore\.steps \(4\) >= regenerate\.steps \(4\)"):
        _load("sol_rl", "explore.precision=fp32", "explore.steps=4", "regenerate.steps=4")


SDE_OBJECTIVE = '''
from solrl_core.rl.objective_grpo import FlowGRPO


class NoisyRollouts(FlowGRPO):
    """A plug-in that samples its rollouts on an SDE, as Flow-GRPO does."""

    section = None

    def sampling_noise_level(self):
        return self.settings.get("noise", 0.5)
'''


def test_sde_rollouts_explore_on_the_regenerate_schedule(tmp_path, monkeypatch):
    """An SDE sample at 6 steps is another image than at 10: an objective that samples SDE rollouts (Flow-GRPO, or a
    plug-in whose noise level is above 0) explores at the regenerate's step count, every guardrail rung too, and its
    window lies within the schedule; each refusal is one line naming the keys."""
    with pytest.raises(ConfigError) as info:
        _load("sol_rl", "objective.name=flow_grpo")
    message = str(info.value)
    assert "\n" not in message and "set explore.steps: 10" in message and "another image than at 10" in message
    cfg = _load("sol_rl", "objective.name=flow_grpo", "explore.steps=10")  # cheaper by precision alone
    assert cfg.explore.steps == cfg.regenerate.steps and family_conflict(cfg) is None
    _load("naive_quant", "objective.name=flow_grpo")  # one sampling stage: nothing to agree with
    _load("sol_rl", "explore.steps=3")  # ODE rollouts: a few-step explore keeps its seed's image
    with pytest.raises(ConfigError, match=r"explore.guardrail.ladder: the rung \['fp8_emulated', 6\]"):
        _load("sol_rl", "objective.name=flow_grpo", "explore.steps=10", "explore.guardrail.enabled=true")
    _load("sol_rl", "objective.name=flow_grpo", "explore.steps=10", "explore.guardrail.enabled=true",
          "explore.guardrail.ladder=[[fp8_emulated, 10], [fp32, 10]]")
    with pytest.raises(ConfigError, match="reaches step 10, past the 10 steps"):
        _load("baseline", "objective.name=flow_grpo", "objective.flow_grpo.window_start=[7, 9]",
              "objective.flow_grpo.window_size=2")
    (tmp_path / "noisy_objective.py").write_text(SDE_OBJECTIVE)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="objective noisy_objective:NoisyRollouts samples SDE rollouts"):
        _load("sol_rl", "objective.name=noisy_objective:NoisyRollouts")
    _load("sol_rl", "objective.name=noisy_objective:NoisyRollouts", "objective.options={noise: 0.0}")
