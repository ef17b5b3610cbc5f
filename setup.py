"""Where the one import name comes from: the repository's flows/, tasks/ and configs/ folders, which keep their place
at the top of the checkout, install as solrl.flows, solrl.tasks and solrl.configs beside solrl/ (the command line)
and solrl_core/ (the library). Everything else about the package is in pyproject.toml."""

from pathlib import Path
from runpy import run_path

from setuptools import find_packages, setup

# top folders installed as solrl.<folder>: written once, in solrl/layout.py (read here without importing solrl)
UNDER_SOLRL = run_path(str(Path(__file__).resolve().parent / "solrl" / "layout.py"))["UNDER_SOLRL"]

setup(
    packages=find_packages(include=["solrl", "solrl.*", "solrl_core", "solrl_core.*"])
    + [f"solrl.{name}" for name in find_packages(include=[f"{top}{rest}" for top in UNDER_SOLRL for rest in ("", ".*")])],
    package_dir={f"solrl.{top}": top for top in UNDER_SOLRL},
)
