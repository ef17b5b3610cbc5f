"""The loop of solrl_core/method.py over a step runner: the steps in the method's order, the audit where it is due,
the evaluations on the config's schedule (the plain runner runs real iterations: tests/unit/doctor/
test_acceptance.py)."""

from __future__ import annotations

from repo_paths import ROOT
from solrl_core.config.loading import load_config
from solrl_core.method import ITERATION, evaluation_due, run_iteration, run_training
from solrl_core.run.rundir import RunDir
from solrl_core.run.stage_table import STAGES


def recording_runner(calls: list):
    def run_step(stage: str, iteration: int) -> dict:
        calls.append((stage, iteration))
        return {"stage": stage, "iteration": iteration}
    return run_step


def test_an_iteration_runs_the_methods_steps_in_order_and_the_audit_where_due():
    cfg = load_config(ROOT / "configs" / "demo.yaml", ["audit.every=2"])
    calls = []
    manifests = run_iteration(cfg, 0, recording_runner(calls))
    assert [stage for stage, _ in calls] == [step.name for step in ITERATION] == list(STAGES)
    assert manifests["update"] == {"stage": "update", "iteration": 0}
    calls.clear()
    run_iteration(cfg, 1, recording_runner(calls))  # the 2nd iteration is audited, after score_final
    names = [stage for stage, _ in calls]
    assert names[names.index("score_final") + 1] == "audit" and len(names) == len(STAGES) + 1
    assert {iteration for _, iteration in calls} == {1}


def test_training_evaluates_before_and_on_the_schedule(tmp_path):
    cfg = load_config(ROOT / "configs" / "demo.yaml", ["eval.every=3"])
    events = []
    run_training(RunDir(tmp_path / "run"), cfg, 7, iterate=lambda i: events.append(("iterate", i)),
                 evaluate=lambda step: {"step": step},
                 after_iteration=lambda i: events.append(("after", i)),
                 after_evaluation=lambda step, result: events.append(("eval", result["step"])))
    assert [e for e in events if e[0] == "eval"] == [("eval", 0), ("eval", 3), ("eval", 6), ("eval", 7)]
    assert events[:4] == [("eval", 0), ("iterate", 0), ("after", 0), ("iterate", 1)]
    assert events.index(("eval", 3)) == events.index(("after", 2)) + 1  # after the 3rd iteration's own logging
    assert [evaluation_due(cfg, s, 7) for s in range(8)] == [True, False, False, True, False, False, True, True]
    off = load_config(ROOT / "configs" / "demo.yaml", ["eval.every=0"])
    events.clear()
    run_training(RunDir(tmp_path / "run2"), off, 2, iterate=lambda i: events.append(i), evaluate=lambda s: {})
    assert events == [0, 1]
