"""A stop signal whose KeyboardInterrupt C code turned into another exception on its way up (torch's extension import
during start-up: "TypeError: expected a message argument") still ends the command with the interrupted exit and the
resume line, never a traceback and exit 1."""

from __future__ import annotations

import argparse
import signal

import pytest

import solrl.cli.main as cli
from solrl.flows.signals import RESUME_LINE
from solrl_core import stop


def _parser_running(func):
    parser = argparse.ArgumentParser(prog="solrl")
    parser.set_defaults(func=func)
    return lambda: parser


def _mangled_stop(args):
    stop.request(signal.SIGTERM)  # what the handler records before it raises KeyboardInterrupt
    raise TypeError("expected a message argument")


def test_an_error_raised_in_place_of_a_stop_is_the_interrupted_exit(monkeypatch, capsys):
    monkeypatch.setattr(cli, "build_parser", _parser_running(_mangled_stop))
    try:
        assert cli._run([]) == 128 + signal.SIGTERM
    finally:
        stop.handled()
    assert RESUME_LINE in capsys.readouterr().err
    assert stop.requested() is None


def test_the_same_error_without_a_stop_stays_a_bug(monkeypatch):
    def broken(args):
        raise TypeError("a bug")

    monkeypatch.setattr(cli, "build_parser", _parser_running(broken))
    with pytest.raises(TypeError, match="a bug"):
        cli._run([])
