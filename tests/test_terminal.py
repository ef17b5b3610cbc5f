"""What the terminal shows: counts in words, every command's --help, `solrl status`, quiet and default output."""

from __future__ import annotations

from solrl_core.wording import plural


def test_plural_agrees_with_the_count():
    assert plural(1, "iteration") == "1 iteration"
    assert plural(0, "iteration") == "0 iterations"
    assert plural(2, "iteration") == "2 iterations"
    assert plural(1, "family", "families") == "1 family"
    assert plural(4, "family", "families") == "4 families"
