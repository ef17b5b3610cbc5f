"""The end-of-training summary: the evaluations as a table (with the change from the first) and as a plot."""

import numpy as np
from PIL import Image

from solrl_core.learning_curve import eval_table, plot_eval_curve


def _evals(values):
    return [{"step": s, "metrics": {"reward": r, "embedded": r / 2}} for s, r in values]


def test_table_rows_columns_and_change():
    lines = eval_table(_evals([(0, 0.41), (8, 0.47), (16, 0.56)])).splitlines()
    assert lines[0].split()[-2:] == ["reward", "embedded"]
    assert [line.split()[0] for line in lines[1:4]] == ["0", "8", "16"]
    assert lines[2].split()[1:] == ["0.4700", "0.2350"]
    assert lines[-1].split() == ["change", "+0.1500", "+0.0750"]
    assert len(eval_table(_evals([(0, 0.4)])).splitlines()) == 2  # no change row for one evaluation


def test_plot_is_a_png_that_depends_on_the_values(tmp_path):
    a = plot_eval_curve(_evals([(0, 0.4), (4, 0.5), (8, 0.45)]), tmp_path / "a.png")
    b = plot_eval_curve(_evals([(0, 0.4), (4, 0.3), (8, 0.45)]), tmp_path / "b.png")
    image_a, image_b = np.asarray(Image.open(a)), np.asarray(Image.open(b))
    assert image_a.shape == image_b.shape and image_a.shape[0] > 200
    assert not np.array_equal(image_a, image_b)


def test_the_gold_gap_is_in_the_table_but_not_drawn_as_a_reward(tmp_path):
    def evals(gaps):
        return [{"step": s, "metrics": {"reward": 0.5 + s / 10, "gold": 0.5, "gold_gap": g}} for s, g in gaps]

    lines = eval_table(evals([(0, 0.0), (4, 0.4)])).splitlines()
    assert lines[0].split()[-3:] == ["reward", "gold", "gold_gap"] and lines[-1].split()[-1] == "+0.4000"
    a = np.asarray(Image.open(plot_eval_curve(evals([(0, 0.0), (4, 0.4)]), tmp_path / "a.png")))
    b = np.asarray(Image.open(plot_eval_curve(evals([(0, 0.0), (4, -0.4)]), tmp_path / "b.png")))
    np.testing.assert_array_equal(a, b)  # only the gap differs, and it is not plotted
