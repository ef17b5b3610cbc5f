"""With the progress bars off (`solrl train --no-progress`), each finished stage prints one short line, unless
--quiet (which the CLI passes on as Prefect's console log level ERROR); with bars on, none."""

from __future__ import annotations

import re

import pytest

from flows.progress import QUIET_LEVEL, QUIET_VARIABLE, stage_done, stage_line


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
