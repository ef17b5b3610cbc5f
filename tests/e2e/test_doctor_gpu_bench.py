"""`solrl doctor --gpu-bench` on a machine without CUDA, in a fresh process: one line, exit 2, nothing written, and
neither Prefect nor MLflow imported (the doctor's lines and the bench's logic: tests/unit/doctor/test_doctor.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from repo_paths import ROOT


@pytest.mark.e2e
def test_gpu_bench_without_cuda_is_one_line_exit_2_and_imports_no_prefect(tmp_path):
    code = ("import sys\nfrom solrl_core.doctor.cli import main\nrc = main(['--gpu-bench', '--out', sys.argv[1]])\n"
            "assert not {'prefect', 'mlflow'} & set(sys.modules), 'prefect or mlflow imported'\nsys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: solrl doctor --gpu-bench needs a CUDA GPU")
    assert not (tmp_path / "r").exists()


