"""Labelled grids: each image under its prompt with its rank and reward, the best first and the worst last."""

import numpy as np
import pytest

from solrl_core.grids import MIN_TILE, Tile, fit_tile, grid_layout, labelled_grid, rank_captions
from solrl_core.run.pool import write_table
from solrl_core.pool_plots import best_worst_grid, top_bottom_grids


def _flat(colour, size=8):
    return np.full((size, size, 3), colour, np.uint8)


def test_rank_captions_name_best_worst_and_rank_in_the_images_order():
    assert rank_captions([0.2, 0.9, 0.5]) == ["worst · 0.200", "best · 0.900", "#2 · 0.500"]
    assert rank_captions([0.7]) == ["0.700"]


def test_images_are_enlarged_to_see_shapes_and_captions_are_drawn():
    image = np.zeros((8, 8, 3), np.uint8)
    image[:4, :4] = 255
    big = fit_tile(image, MIN_TILE)
    assert big.shape == (MIN_TILE, MIN_TILE, 3) and big[: MIN_TILE // 2, : MIN_TILE // 2].min() == 255  # crisp
    one = labelled_grid([("a red square", [Tile(image, "best 0.900")])])
    other = labelled_grid([("a red square", [Tile(image, "worst 0.100")])])
    prompt = labelled_grid([("two blue circles", [Tile(image, "best 0.900")])])
    assert one.shape == other.shape and one.shape[1] >= MIN_TILE
    assert not np.array_equal(one, other) and not np.array_equal(one, prompt)  # caption and prompt are written


@pytest.fixture
def pool(tmp_path):
    """Two prompts × 4 candidates; candidate i is a flat image of grey level 10·i + 5."""
    n = 8
    path = tmp_path / "pool.zarr"
    write_table(path, {"image": np.stack([_flat(10 * i + 5) for i in range(n)]),
                       "prompt_index": np.repeat(np.arange(2), 4)}, {"prompts": ["one cat", "two dogs"]})
    reward = np.array([0.1, 0.9, 0.5, 0.3, 0.8, 0.2, 0.6, 0.4])
    return path, reward


def test_best_worst_rows_are_ordered_by_reward(pool):
    path, reward = pool
    grids = top_bottom_grids(path, reward, 2, tile=MIN_TILE)
    assert sorted(grids) == [0, 1]
    # prompt 0: rewards 0.1, 0.9, 0.5, 0.3 -> best 1 (0.9), best 2 (0.5), gap, worst 2 (0.3), worst 1 (0.1)
    corners = grid_layout([("", [Tile(_flat(0), "")] * 2 + [None] + [Tile(_flat(0), "")] * 2)]).rows[0][2]
    levels = [int(grids[0][y + MIN_TILE // 2, x + MIN_TILE // 2, 0]) for x, y in corners]
    assert levels[:2] == [15, 25] and levels[3:] == [35, 5]
    whole = best_worst_grid(path, reward, n_prompts=2, n_show=2)
    assert whole.shape[0] > grids[0].shape[0] and whole.shape[1] == grids[0].shape[1]
