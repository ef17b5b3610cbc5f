"""The screen replay that tests/e2e/test_progress_bars.py reads `solrl train`'s bars with: it must tell a bar redrawn
in place from one printed line by line, also under tqdm's nested bars."""

from __future__ import annotations

from screen_replay import rows_per_bar


def test_the_screen_replay_tells_a_bar_redrawn_in_place_from_one_printed_line_by_line():
    in_place = "\rexplore it0 (fp32):  50%|#   | 1/2 [00:01]\rexplore it0 (fp32): 100%|####| 2/2 [00:02]\n"
    seen = rows_per_bar(in_place)
    assert list(seen["explore"]) == [0] and not seen["update"]
    assert len(rows_per_bar(in_place.replace("\r", "\n"))["explore"]) == 2  # a new line per redraw
    nested = "\rscore explore it0: 0%\n\rexplore it0 (fp32): 1/2\x1b[A\n\rexplore it0 (fp32): 2/2\x1b[A"
    seen = rows_per_bar(nested)  # tqdm's second bar: one line down, drawn, back up
    assert list(seen["explore"]) == [1] and list(seen["score_explore"]) == [0]
