"""`python -m solrl_core.bench.compiled_vs_eager` (docs/lab/compile-2026-11-29.md) on the embedded model, traced with
aot_eager (seconds; inductor's compile takes a minute on 2 cores): its rows, its table and its numbers file."""

from __future__ import annotations

import json

import pytest

from solrl_core.bench.compiled_vs_eager import main


pytestmark = pytest.mark.slow  # whole iterations or models: `make test` runs it, `make test-fast` not


def test_the_benchmark_measures_both_copies_and_writes_its_numbers(tmp_path, capsys, one_torch_thread):
    out = tmp_path / "compile.json"
    assert main(["--models", "embedded", "--batch", "2", "--steps", "2", "--repeats", "1", "--backend", "aot_eager",
                 "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["model"], r["copy"]) for r in rows] == [("embedded", "fp32"), ("embedded", "nvfp4_emulated")]
    assert all(r["batch"] == 2 and r["steps"] == 2 for r in rows)
    assert rows[0]["rel_diff"] < 1e-4  # full precision: compiled is eager to float32 rounding
    assert all(r["eager_s"] > 0 and r["compiled_s"] > 0 and r["first_compiled_call_s"] > 0 for r in rows)
    table = capsys.readouterr().out
    assert "| embedded | fp32 |" in table and "| embedded | nvfp4_emulated |" in table
