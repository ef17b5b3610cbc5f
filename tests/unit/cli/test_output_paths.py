"""Commands that write a directory check it before their work: `solrl pretrain --out` (about an hour of work with the
defaults), `solrl distill-reward --out` and `solrl make-tiny MODEL DIR` refuse an output path they cannot write in one
line (exit 2), without starting the work and without touching what is there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from solrl_core.userfiles import check_output_dir

# (command line before the output path, the option's name in the message, the function doing the work)
COMMANDS = [
    (("pretrain", "--out"), "--out", "solrl_core.lab.embedded_pretrain.pretrain"),
    (("distill-reward", "--out"), "--out", "solrl_core.lab.embedded_distill.distill"),
    (("make-tiny", "sd35m"), "make-tiny DIR", "solrl_core.tiny_bundle.make_tiny_bundle"),
]


@pytest.fixture(params=COMMANDS, ids=lambda c: c[0][0])
def command(request, monkeypatch):
    """The command, with its work replaced by a failure: a refusal must come before it starts."""
    words, flag, work = request.param
    module, _, name = work.rpartition(".")

    def started(*args, **kwargs):
        raise AssertionError(f"{name} started before the output path was checked")

    monkeypatch.setattr(__import__(module, fromlist=[name]), name, started)
    return words, flag


def refused(capsys, words, path, *needles) -> str:
    from solrl.cli.main import main

    capsys.readouterr()
    code = main([*words, str(path)])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err and out == "", err
    assert lines[0].startswith("solrl: error: ") and str(path) in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def test_an_existing_file(command, capsys, tmp_path):
    words, flag = command
    existing = tmp_path / "weights"
    existing.write_text("keep me")
    refused(capsys, words, existing, flag, "is a file, not a directory")
    refused(capsys, words, existing / "sub", f"{existing} is a file")
    assert existing.read_text() == "keep me"


def test_a_link_that_leads_nowhere(command, capsys, tmp_path):
    words, flag = command
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone" / "out")
    refused(capsys, words, link, "a symbolic link that leads nowhere", str(tmp_path / "gone" / "out"), flag)
    refused(capsys, words, link / "sub", f"{link} is a symbolic link that leads nowhere")
    assert not (tmp_path / "gone").exists()


def test_a_folder_that_cannot_be_written(command, capsys, tmp_path, monkeypatch):
    """Permissions (simulated for root, who ignores them: what os.access answers a user)."""
    words, flag = command
    parent = tmp_path / "readonly"
    parent.mkdir()
    parent.chmod(0o555)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == parent else real(p, mode, **kw))
    try:
        refused(capsys, words, parent / "out", f"cannot write to {parent}", "permission denied", flag)
    finally:
        parent.chmod(0o755)
    assert list(parent.iterdir()) == []


def test_a_writable_path_passes(tmp_path):
    for path in (tmp_path / "new" / "deeper", tmp_path):
        check_output_dir(path, "--out")
    assert not (tmp_path / "new").exists()  # checked, not made
