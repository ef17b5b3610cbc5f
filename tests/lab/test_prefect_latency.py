"""`python -m solrl.flows.lab.prefect_latency`: the per-iteration cost of Prefect's orchestration, timed on a live API."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from solrl.flows.lab.prefect_latency import _ms, main, report


def test_summary_of_timings_in_milliseconds():
    summary = _ms([0.3, 0.1, 0.2, 2.0])
    assert summary == {"median": pytest.approx(250.0), "p90": pytest.approx(2000.0), "max": pytest.approx(2000.0)}


def test_bad_counts_are_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--subflows", "0"])
    assert stop.value.code == 2
    assert "--subflows must be at least 1" in capsys.readouterr().err


def test_report_names_what_was_timed():
    summaries = {name: {"median": 10.0, "p90": 20.0, "max": 30.0}
                 for name in ("subflow", "create", "running", "completed", "read")}
    nested = {**summaries, "subflow": {**summaries["subflow"], "nested": 5}}
    top_level = {**summaries, "subflow": {**summaries["subflow"], "nested": 0}}
    assert report(nested, 5, 7).startswith("empty subflow with 7 no-op task(s), 5 times: median 10 ms")
    assert report(top_level, 5, 7).startswith("empty top-level flow run with 7 no-op task(s)")


@pytest.mark.e2e
@pytest.mark.parametrize("top_level", [False, True], ids=["nested", "top-level"])
def test_times_empty_flow_runs_against_the_api(session_env, top_level):
    flag = ["--top-level"] if top_level else []
    done = subprocess.run([sys.executable, "-m", "solrl.flows.lab.prefect_latency", "--subflows", "3", "--tasks", "2", *flag],
                          env=session_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    what = "top-level flow run" if top_level else "subflow"
    subflow = re.search(rf"empty {what} with 2 no-op task\(s\), 3 times: median (\d+) ms, 90th percentile (\d+) ms, "
                        r"slowest (\d+) ms \((\d) of 3 nested in a parent flow run\)", done.stdout)
    assert subflow, done.stdout
    median, p90, slowest, nested = map(int, subflow.groups())
    assert 0 < median <= p90 <= slowest
    assert nested == (0 if top_level else 3)  # Prefect's own record of each run's parent
    calls = dict(re.findall(r"(create|running|completed|read) (\d+)", done.stdout))
    assert set(calls) == {"create", "running", "completed", "read"}
    # the same numbers as report() writes them from measure()'s summaries
    assert report({"subflow": {"median": median, "p90": p90, "max": slowest, "nested": nested},
                   **{k: {"median": float(v)} for k, v in calls.items()}}, 3, 2).splitlines()[0] in done.stdout
