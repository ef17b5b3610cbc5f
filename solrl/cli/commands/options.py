"""Options shared by the commands that run flows: how loud the terminal is, and whether progress bars show."""

from __future__ import annotations

import argparse


def output_options(p: argparse.ArgumentParser, no_progress: bool = False) -> None:
    """--verbose / --quiet (and --no-progress) for the commands that run flows."""
    if no_progress:
        p.add_argument("--no-progress", action="store_true",
                       help="no progress bars: one line per finished stage instead (for logs)")
    loud = p.add_mutually_exclusive_group()
    loud.add_argument("--verbose", action="store_true", help="also show Prefect's INFO log lines (flow and task runs)")
    loud.add_argument("--quiet", action="store_true",
                      help="for scripts: no progress bars, no log lines but errors, only the final result")


def show_progress(args) -> bool:
    """Progress bars unless --no-progress or --quiet."""
    return not (args.no_progress or args.quiet)


def protocol_options(p: argparse.ArgumentParser, kind: str, example: str) -> None:
    """CONFIG, --run-dir, --set, --quick and --report-only: the options of the commands that train a protocol of runs
    and report on them (`solrl bench`, `solrl matrix`)."""
    p.add_argument("config", help=f"{kind} YAML: a file, or a packaged {kind} config's name, e.g. {example}")
    p.add_argument("--run-dir", help="where the runs and the report go (default: the config's run_root)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help=f"override a {kind} config key, e.g. --set iterations=4 or --set seeds=1 (repeatable)")
    p.add_argument("--quick", action="store_true",
                   help="the config's smaller 'quick' protocol (fewer seeds and iterations; its own run directory), "
                   "the report labelled quick")
    p.add_argument("--report-only", action="store_true",
                   help="do not train: rebuild the report from the runs already in the run directory")
