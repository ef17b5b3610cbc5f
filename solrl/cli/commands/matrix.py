"""`solrl matrix CONFIG`: the learning matrix — every objective × family × world of a matrix config trained over
several seeds, and whether each rises on held-out evaluation (solrl_core/bench/matrix_report.py)."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from solrl.cli.commands.options import output_options, protocol_options, show_progress
from solrl.flows.prefect_server import client_env, prefect_api
from solrl.flows.service_checks import check_services
from solrl_core.errors import SolrlError
from solrl_core.wording import plural


def _selected(runs, patterns: list[str] | None):
    """The runs whose cell (world/objective/family) matches one of `patterns` (shell globs); all without any. A
    pattern that matches no cell is an error naming the cells."""
    if not patterns:
        return runs
    cells = list(dict.fromkeys(r.cell for r in runs))
    for pattern in patterns:
        if not fnmatch.filter(cells, pattern):
            raise SolrlError(f"--cell {pattern} matches no cell of the matrix (cells: {', '.join(cells)})")
    return [r for r in runs if any(fnmatch.fnmatch(r.cell, p) for p in patterns)]


def cmd_matrix(args) -> int:
    from solrl_core.bench.matrix_config import load_matrix_config, matrix_runs
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_preflight import preflight

    overrides = list(args.set or [])
    matrix, base_dir = load_matrix_config(args.config, overrides, quick=args.quick)
    runs = matrix_runs(matrix, base_dir, args.run_dir)
    chosen = _selected(runs, args.cell)
    root = RunDir(args.run_dir or matrix.run_root)
    if args.status and Path(args.status).is_dir():
        raise SolrlError(f"--status {args.status} is a directory; give the YAML file to write")
    command = " ".join(["solrl", "matrix", str(args.config), *(["--quick"] if args.quick else []),
                        *[f"--set {o}" for o in overrides], *[f"--cell '{c}'" for c in args.cell or []]])
    if not args.report_only:
        root.check_writable()
        client_env()
        check_services(chosen[0].cfg)
        for cell in dict.fromkeys(r.cell for r in chosen):
            preflight(next(r.cfg for r in chosen if r.cell == cell))
        from solrl.flows.matrix import train_runs

        # each run holds its own directory while it trains (flows/bench.py train_one), so commands training other
        # cells of the same matrix may run beside this one; the report below is written under the matrix's lock
        with prefect_api().ready():
            train_runs([r.key for r in chosen], str(args.config), overrides, args.run_dir,
                       progress=show_progress(args), quick=args.quick)
    done = [r for r in runs if RunDir(r.run_dir).config_path.is_file()]
    if not done:
        raise SolrlError(f"no learning-matrix runs under {root.root} yet; run: {command}")
    from solrl.flows.tracking import log_matrix_report, tracking_uri
    from solrl_core.bench.matrix_report import build_report, status

    with root.hold():
        report = build_report(done, matrix, root.root, command=command)
        report["mlflow"] = log_matrix_report(root.root, tracking_uri(done[0].cfg), matrix.tracking.experiment, report,
                                             [Path(p) for p in report["files"]])
    print(f"\nlearning matrix '{matrix.name}' ({matrix.protocol} protocol): {plural(len(done), 'run')} of "
          f"{len(runs)} ({plural(matrix.seeds, 'seed')} per cell)")
    print(f"{'cell':<36} {'rise [95% CI]':>30}   verdict")
    for name, cell in report["cells"].items():
        rise = cell.get("rise") or {}
        shown = "-" if rise.get("value") is None else (
            f"{rise['value']:+.4f}" + ("" if rise.get("lo") is None else f" [{rise['lo']:+.4f}, {rise['hi']:+.4f}]"))
        print(f"{name:<36} {shown:>30}   {cell['verdict']}")
    if args.status:
        from solrl_core.config.learning_status import write_status

        write_status(Path(args.status), status(report, str(args.config)), command)
        print(f"status        : {args.status}")
    print(f"report        : {root.root / 'report.md'}")
    print(f"MLflow run    : {report['mlflow']['mlflow_run_id']} at {report['mlflow']['tracking_uri']}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("matrix", help="train every objective x family x world over several seeds: does each rise?",
                       description="The learning matrix: train every cell of a matrix config (each world's "
                       "objectives x families, e.g. DiffusionNFT, Flow-GRPO and AWM x the four families on the "
                       "embedded image world, and the video world's) once per run seed into "
                       "<run-dir>/<world>/<objective>/<family>-s<seed>/ (runs resume), then write <run-dir>/report.md "
                       "with a plot per world and report.json, and log them to MLflow: each cell's held-out rise "
                       "over its start with a 95% interval over seeds, its verdict (rises, falls, cannot tell with "
                       "its power) and the per-seed numbers. Commands training other --cell patterns of one matrix "
                       "may run side by side (one per core). --status FILE writes the verdicts that `solrl presets` "
                       "and `solrl train` report (configs/measured/learning_status.yaml ships them). configs/"
                       "learning_matrix.yaml takes hours on 2 CPU cores: run it outside CI.")
    protocol_options(p, "matrix", "learning_matrix")
    p.add_argument("--cell", action="append", metavar="GLOB",
                   help="train only the cells world/objective/family matching GLOB (repeatable), e.g. "
                   "'image/flow_grpo/*'; the report covers every cell trained so far")
    p.add_argument("--status", metavar="FILE",
                   help="write each cell's verdict to FILE (YAML, as configs/measured/learning_status.yaml)")
    output_options(p, no_progress=True)
    p.set_defaults(func=cmd_matrix)
