"""The fidelity guardrail as the pipeline applies it: replayed from finished iterations' manifests."""

import math

from solrl_core.config.loading import validate_config
from solrl_core.run.rundir import RunDir
from solrl_core.stages.context import StageContext
from solrl_core.stages.explore_setting import explore_setting


def _ctx(tmp_path, iteration, spearmans, enabled=True, regenerate=True, **explore):
    cfg = validate_config({
        "family": "sol_rl" if regenerate else "naive_quant",  # without regeneration the 4-bit samples train
        "explore": {"precision": "auto", "steps": 6, **explore,
                    "guardrail": {"enabled": enabled, "floor": 0.5, "patience": 2,
                                  "ladder": [["fp8_emulated", 6], ["fp32", 10]]}},
        "regenerate": {"enabled": regenerate},
    })
    run = RunDir(tmp_path)
    for i, rho in enumerate(spearmans):
        run.complete(i, "score_final", {"fidelity_spearman": rho})
    return StageContext(run, cfg, iteration)


def test_auto_resolves_to_emulated_nvfp4_on_cpu_and_says_why(tmp_path):
    setting = explore_setting(_ctx(tmp_path, 0, []))
    assert (setting.precision, setting.steps) == ("nvfp4_emulated", 6)
    assert "emulated" in setting.reason and setting.escalations == ()


def test_low_fidelity_escalates_after_patience_and_keeps_escalating(tmp_path):
    rhos = [0.9, 0.2, 0.3, 0.8, 0.1, math.nan, 0.1]
    assert explore_setting(_ctx(tmp_path / "a", 2, rhos[:2])).precision == "nvfp4_emulated"  # one bad: wait
    s = explore_setting(_ctx(tmp_path / "b", 3, rhos[:3]))  # two bad in a row
    assert (s.precision, s.steps) == ("fp8_emulated", 6) and len(s.escalations) == 1
    assert s.escalations[0]["iteration"] == 2 and "Spearman" in s.reason
    s = explore_setting(_ctx(tmp_path / "c", 6, rhos[:6]))  # 0.1 then NaN (counts as bad)
    assert (s.precision, s.steps) == ("fp32", 10) and len(s.escalations) == 2
    s = explore_setting(_ctx(tmp_path / "d", 7, rhos))  # top of the ladder: stays
    assert (s.precision, s.steps) == ("fp32", 10)


def test_guardrail_off_or_without_regeneration_keeps_the_config(tmp_path):
    for kwargs in ({"enabled": False}, {"regenerate": False}):
        s = explore_setting(_ctx(tmp_path / str(kwargs), 3, [0.0, 0.0, 0.0], **kwargs))
        assert (s.precision, s.steps) == ("nvfp4_emulated", 6)


def test_an_escalation_decodes_in_full(tmp_path):
    """explore.decode holds while the configured setting does; an escalation's rungs decode every frame in full."""
    from solrl_core.models.explore_decode import DecodePlan

    held = explore_setting(_ctx(tmp_path / "a", 1, [0.9], decode={"scale": 0.5}))
    assert held.decode == DecodePlan(0.5) and held.record()["explore_decode"] == {"scale": 0.5, "decoded_frames": None}
    raised = explore_setting(_ctx(tmp_path / "b", 3, [0.2, 0.2, 0.2], decode={"scale": 0.5}))
    assert raised.escalations and raised.decode == DecodePlan() and "explore_decode" not in raised.record()
