"""`solrl make-tiny` with a model it does not know: one line, exit 2, nothing written, in process and as a command
(the bundle itself: tests/unit/models/backbones/test_make_tiny.py)."""

from __future__ import annotations

import os

import pytest

from cli_processes import solrl
from solrl.cli.main import main
from solrl_core.models.backbones.tiny import tiny_models

@pytest.mark.e2e
def test_unknown_model_is_a_one_line_error(tmp_path, capsys):
    out = tmp_path / "nothing"
    assert main(["make-tiny", "sdxl", str(out)]) == 2
    known = ", ".join(tiny_models())
    assert {"flux1", "wan", "qwenimage-edit"} <= set(tiny_models())
    err = capsys.readouterr().err
    assert err == f"solrl: error: unknown model 'sdxl' (known: {known})\n"
    assert not out.exists()
    proc = solrl(dict(os.environ), "make-tiny", "flux2", str(out), check=False, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"solrl: error: unknown model 'flux2' (known: {known})"]
