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
