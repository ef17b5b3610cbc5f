"""The GPU acceptance command on a CPU, in a fresh process: what docs/gpu-wheels.txt leaves out is not imported on
its path, nor is the orchestration (the acceptance in process: tests/unit/doctor/test_acceptance.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from repo_paths import ROOT
from acceptance_options import acceptance_argv

@pytest.mark.e2e
def test_the_acceptance_imports_no_prefect_mlflow_open_clip_or_upath(tmp_path):
    """What docs/gpu-wheels.txt leaves out is not imported on the acceptance's path (a bench, the embedded and a tiny
    FLUX.1 run with an evaluation); nor is the orchestration."""
    code = ("import sys\nfrom solrl_core.doctor.acceptance import main\nrc = main(sys.argv[1:])\n"
            "bad = {'prefect', 'mlflow', 'open_clip', 'upath', 'ftfy'} & {m.split('.')[0] for m in sys.modules}\n"
            "assert not bad, bad\nsys.exit(rc)")
    argv = acceptance_argv(tmp_path / "acc", "--runs", "embedded", "tiny-flux1", "--precisions", "nvfp4_emulated")
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
