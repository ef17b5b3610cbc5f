"""The benchmark flow: train every family (× run seed) of a bench config, then write and log the report.

Each run trains through the ordinary training flow into `<root>/<family>-s<seed>/` (a subflow), so a benchmark that
was interrupted resumes: finished iterations and evaluations are read back, not recomputed. Runs go seed-major
(every family of seed 0, then seed 1, ...), so a cut-short benchmark still compares all families.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from solrl.flows.tracking import log_bench_report, tracking_uri
from solrl.flows.training import training_flow
from solrl_core.bench.bench_config import BenchRun, bench_runs, load_bench_config
from solrl_core.bench.report import build_report
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import prepare_run


def train_one(run: BenchRun, progress: bool = True) -> None:
    """Train (or resume) one benchmark run in its own run directory, holding it while it trains."""
    rundir = RunDir(run.run_dir)
    with rundir.hold():
        prepare_run(rundir, run.cfg)
        training_flow(str(rundir.root), run.cfg.iterations, progress=progress)


@flow(name="solrl-bench", flow_run_name="bench-{config_path}")
def bench_flow(config_path: str, overrides: list[str] | None = None, run_root: str | None = None,
               progress: bool = True, command: str | None = None, quick: bool = False) -> dict:
    """Train every run of the bench config (its `quick` protocol with `quick`), then build `<root>/report.md`
    (+ plots, report.json) and log it."""
    logger = get_run_logger()
    bench, base_dir = load_bench_config(config_path, overrides, quick=quick)
    runs = bench_runs(bench, base_dir, run_root)
    root = Path(run_root or bench.run_root)
    for i, run in enumerate(runs, 1):
        logger.info("bench run %d/%d: %s -> %s", i, len(runs), run.key, run.run_dir)
        train_one(run, progress=progress)
    report = build_report(runs, bench, root, command=command)
    uri = tracking_uri(runs[0].cfg)
    info = log_bench_report(root, uri, bench.tracking.experiment, report,
                            [Path(p) for p in report["files"]])
    report["mlflow"] = info
    logger.info("bench report: %s", root / "report.md")
    return report
