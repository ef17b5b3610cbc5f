"""The run directory and the seeds across processes: the lock refuses a holder in another process and is released,
and a seed's noise is the same in a fresh interpreter (in process: tests/unit/run/test_rundir_pool.py)."""

import subprocess
import sys

import pytest

from solrl_core.run.rundir import RunDir
from solrl_core.seeds import noise_from_seed


@pytest.mark.e2e
def test_lock_refuses_a_second_holder_in_another_process(tmp_path):
    run = RunDir(tmp_path)
    code = (
        "import sys\nfrom solrl_core.run.rundir import RunDir\nfrom solrl_core.errors import RunDirLockedError\n"
        f"try:\n    RunDir({str(tmp_path)!r}).hold().__enter__()\nexcept RunDirLockedError as e:\n"
        "    print(e); sys.exit(3)\n"
    )
    with run.hold():
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert proc.returncode == 3 and "is held by pid" in proc.stdout
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0  # released


@pytest.mark.e2e
def test_seed_noise_is_identical_across_processes():
    here = noise_from_seed(1234, (3, 8, 8))
    code = "from solrl_core.seeds import noise_from_seed; print(noise_from_seed(1234, (3, 8, 8)).double().sum().item())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert float(out) == pytest.approx(here.double().sum().item(), abs=0, rel=0)
    assert not noise_from_seed(1235, (3, 8, 8)).equal(here)
