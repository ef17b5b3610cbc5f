"""What the terminal shows, in process: counts in words, every command's --help, and no Prefect shutdown notices
(what a run prints: tests/e2e/test_terminal.py)."""

from __future__ import annotations



from solrl_core.wording import plural


def test_plural_agrees_with_the_count():
    assert plural(1, "iteration") == "1 iteration"
    assert plural(0, "iteration") == "0 iterations"
    assert plural(2, "iteration") == "2 iterations"
    assert plural(1, "family", "families") == "1 family"
    assert plural(4, "family", "families") == "4 families"


def subcommands() -> dict:
    import argparse

    from solrl.cli.main import build_parser

    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_every_command_says_what_it_does():
    commands = subcommands()
    assert {"train", "status", "inspect", "eval"} <= set(commands)
    for name, parser in commands.items():
        assert parser.description and len(parser.description.split()) >= 8, name
        text = " ".join(parser.format_help().split())  # the description as --help prints it
        assert " ".join(parser.description.split()[:8]) in text, name
        undocumented = [a.dest for a in parser._actions if not a.help]
        assert not undocumented, f"{name}: options without help: {undocumented}"


def test_prefects_shutdown_notices_stay_off_the_terminal():
    """Prefect's queue services log "Still processing items: N items remaining..." while they send the last events at
    exit, under their class names: after the command's last line, so they are quiet (errors still show)."""
    import logging

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    from solrl_core.quiet import PREFECT_QUEUE_WORKERS, quiet_libraries

    assert set(PREFECT_QUEUE_WORKERS) == {EventsWorker.__name__, APILogWorker.__name__}
    quiet_libraries()
    for name in PREFECT_QUEUE_WORKERS:
        logger = logging.getLogger(name)
        assert not logger.isEnabledFor(logging.WARNING) and logger.isEnabledFor(logging.ERROR)
