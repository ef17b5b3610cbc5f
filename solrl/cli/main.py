"""The `solrl` command line."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings

from solrl.cli.commands import (calibrate, config, deploy, distill, doctor, matrix, models, plan, presets, pretrain, runs,
                            train)
from solrl.flows.signals import RESUME_LINE, interrupted_exit_code, stop_late, stop_on_signals
from solrl.flows.user_errors import as_user_error, hide_user_error_logs, report, say
from solrl_core import stop
from solrl_core.errors import SolrlError
from solrl_core.quiet import quiet_libraries
from solrl_core.renamed import RenamedNotice
from solrl_core.resource_limits import check_resource_limits

DESCRIPTION = """\
solrl: RL post-training of text-to-image and text-to-video flow models with 4-bit exploration.
Each iteration explores many seeds per prompt with a low-precision copy, ranks them with the reward, keeps the
most contrastive seeds, regenerates those at full precision and trains on them (the DiffusionNFT, Flow-GRPO or
AWM objective).
Every stage writes its artifact into the run directory, so runs resume after a crash and stages re-run alone."""


# Prefect's console handler (its API handler still receives every line, so the Prefect UI keeps them) and MLflow.
_LOG_LEVEL_VARIABLES = ("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "MLFLOW_LOGGING_LEVEL")


def _terminal(args) -> None:
    """What the terminal shows, set before Prefect and MLflow are imported: their own log lines only from WARNING up
    (unless set in the environment), ERROR with --quiet, INFO with --verbose."""
    level = "INFO" if getattr(args, "verbose", False) else "ERROR" if getattr(args, "quiet", False) else None
    for name in _LOG_LEVEL_VARIABLES:
        if level:
            os.environ[name] = level
        else:
            os.environ.setdefault(name, "WARNING")


# The command groups in the order `solrl --help` lists them; each module's register(sub) adds its subcommands.
COMMANDS = (train, deploy, runs, presets, models, plan, matrix, calibrate, doctor, pretrain, distill, config)


def installed_version() -> str:
    """solrl's version from the installed package's metadata (pyproject.toml's `version`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("solrl")
    except PackageNotFoundError:
        return "unknown (solrl is not installed: pip install -e .)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="solrl", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"solrl {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv`; its exit code. Without `argv` (sys.argv: the command of this process, as the
    `solrl` script and `python -m solrl` run it) the command also owns the process's stop signals and its end
    (flows/signals.py): a signal in any phase, start-up and shutdown included, gives the interrupted exit."""
    owns_process = argv is None
    if owns_process:
        stop_on_signals()  # first: a signal during start-up (imports, config, model load) stops as one later does
    code = _run(argv)
    if owns_process:
        try:
            stop_late(code)
        except KeyboardInterrupt:  # a signal just as the command ended
            return interrupted()
    return code


def _run(argv: list[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        quiet_libraries()
        _terminal(args)
        show_notices()
        hide_user_error_logs()
        check_resource_limits()  # before torch is imported: an address-space limit breaks its import
        code = args.func(args)
        stop.check()  # a stop whose interrupt was lost on the way (flows/signals.py): still the interrupted exit
        sys.stdout.flush()  # a closed pipe shows here, not as "Exception ignored" at exit
        return code
    except BrokenPipeError:
        return closed_pipe()
    except Exception as exc:  # noqa: BLE001 - an OSError when the user can fix it (full disk, permissions), a limit
        if stop.requested():  # C code that called back into Python turned the stop's KeyboardInterrupt into another
            return interrupted()  # error (torch's extension import: "TypeError: expected a message argument")
        error = as_user_error(exc)
        if error is None:
            raise
        return report(error)
    except KeyboardInterrupt:
        return interrupted()


def show_notices() -> None:
    """An old name that still works (solrl_core/renamed.py) is said in one `solrl: note:` line, not as a warning
    with its source line; other warnings show as Python shows them."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, RenamedNotice):
            say(f"solrl: note: {message}")
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def interrupted() -> int:
    """After a stop (Ctrl-C, SIGTERM, SIGHUP): the resume line and 128 + the signal's number."""
    code = interrupted_exit_code()
    stop.handled()
    say(RESUME_LINE)
    return code


def closed_pipe() -> int:
    """The reader of stdout went away (`solrl status | head`): stop writing, quietly, and exit 141 (128 + SIGPIPE),
    what a shell reports for a command ended by a closed pipe. stdout then writes into nothing: Python flushes it
    once more at exit, and that would be a second broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file (main() called with stdout captured in memory)
        pass
    return 128 + signal.SIGPIPE

