"""The learning-matrix flow: train runs of a matrix config (every cell × seed, or those asked for), each through the
ordinary training flow into `<root>/<world>/<objective>/<family>-s<seed>/` (a subflow, as the benchmark's runs), so an
interrupted matrix resumes. Runs go seed-major: every cell of seed 0 first, so a matrix cut short still has every
cell. `solrl matrix` then writes and logs the report (solrl_core/bench/matrix_report.py)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from solrl.flows.bench import train_one
from solrl_core.bench.matrix_config import load_matrix_config, matrix_runs


@flow(name="solrl-learning-matrix", flow_run_name="matrix-{config_path}")
def train_runs(keys: list[str], config_path: str, overrides: list[str] | None = None, run_root: str | None = None,
               progress: bool = True, quick: bool = False) -> list[str]:
    """Train (or resume) the matrix runs named by `keys` (`MatrixRun.key`), in the matrix's order."""
    logger = get_run_logger()
    matrix, base_dir = load_matrix_config(config_path, overrides, quick=quick)
    runs = [r for r in matrix_runs(matrix, base_dir, run_root) if r.key in set(keys)]
    for i, run in enumerate(runs, 1):
        logger.info("matrix run %d/%d: %s -> %s", i, len(runs), run.key, run.run_dir)
        train_one(run, progress=progress)
    return [r.key for r in runs]
