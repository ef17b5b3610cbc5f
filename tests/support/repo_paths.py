"""Where the tests find the repository: its root (the working directory of the CLI subprocesses), the sized config
most tests extend, and this folder of helpers (on sys.path through tests/conftest.py; a subprocess that imports a
helper needs it on PYTHONPATH)."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parents[1]
TINY = ROOT / "tests" / "configs" / "tiny.yaml"  # flows/lab/faults.py extends the same file
