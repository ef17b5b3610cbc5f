"""With the progress bars off (`solrl train --no-progress`), each finished stage prints one short line, unless
--quiet (which the CLI passes on as Prefect's console log level ERROR); with bars on, none."""

from __future__ import annotations

import re

import pytest

from solrl.flows.progress import QUIET_LEVEL, QUIET_VARIABLE, stage_done, stage_line


def test_the_line_names_the_iteration_the_stage_and_its_time():
    assert stage_line("explore", 12.34, 3, 10) == "iteration 3 (of 10) explore done (12.3 s)"
    assert stage_line("update", 0.04, 0) == "iteration 0 update done (0.0 s)"
    assert stage_line("evaluation after 5 iterations", 4.0) == "evaluation after 5 iterations done (4.0 s)"


@pytest.mark.parametrize(("progress", "level", "lines"), [
    (False, "WARNING", 1), (False, None, 1), (False, QUIET_LEVEL, 0), (True, "WARNING", 0), (True, QUIET_LEVEL, 0)])
def test_a_finished_stage_prints_one_line_only_without_bars_and_not_quiet(progress, level, lines, monkeypatch,
                                                                          capsys):
    if level is None:
        monkeypatch.delenv(QUIET_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(QUIET_VARIABLE, level)
    with stage_done(progress, "explore", 3, 10):
        pass
    out = capsys.readouterr().out.splitlines()
    assert len(out) == lines and all(re.fullmatch(r"iteration 3 \(of 10\) explore done \(\d+\.\d s\)", o) for o in out)


def test_a_stage_that_raises_prints_no_done_line(monkeypatch, capsys):
    monkeypatch.setenv(QUIET_VARIABLE, "WARNING")
    with pytest.raises(RuntimeError), stage_done(False, "explore", 3, 10):
        raise RuntimeError("boom")
    assert capsys.readouterr().out == ""


METRICS = {"reward/explore_mean": 0.7123, "reward/train_mean": 0.7444, "loss/total": 0.012345}


def test_every_iteration_says_its_rewards_and_the_time_left(monkeypatch, capsys):
    """The time left is what the computed iterations took (the evaluation between them included) times those left;
    iterations a resumed run had finished count for nothing; nothing under --quiet."""
    import solrl.flows.progress as progress

    now = [100.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    monkeypatch.setenv(QUIET_VARIABLE, "WARNING")
    clock = progress.IterationClock(5)
    clock.begin()
    clock.say(0, METRICS, computed=False)  # resumed: finished by an earlier command
    clock.begin()
    now[0] += 10.0
    clock.say(1, METRICS)
    now[0] += 20.0  # an evaluation
    clock.begin()
    now[0] += 10.0
    clock.say(2, METRICS)
    clock.begin()
    now[0] += 10.0
    monkeypatch.setenv(QUIET_VARIABLE, QUIET_LEVEL)
    clock.say(3, METRICS)
    assert capsys.readouterr().out.splitlines() == [
        "iteration 0 (of 5) done before (resumed): explore reward 0.712, train reward 0.744, loss 0.01235",
        "iteration 1 (of 5) done in 10.0 s: explore reward 0.712, train reward 0.744, loss 0.01235; "
        "about 30 s left",  # 3 left x 10 s
        "iteration 2 (of 5) done in 10.0 s: explore reward 0.712, train reward 0.744, loss 0.01235; "
        "about 40 s left",  # 2 left x (10 + 20 + 10) / 2
    ]
    assert clock.line(4, METRICS).endswith("loss 0.01235")  # the last: nothing left


def test_durations_read_as_people_say_them():
    from solrl_core.wording import duration

    assert [duration(s) for s in (0.4, 42, 185, 3720, 90061)] == ["0 s", "42 s", "3 min 05 s", "1 h 02 min",
                                                                 "25 h 01 min"]
