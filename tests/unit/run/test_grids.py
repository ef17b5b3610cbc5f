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


def _video(levels, size=8):
    """A video whose frame t is a flat image of grey level levels[t]."""
    return np.stack([_flat(level, size) for level in levels])


def test_a_video_still_is_a_strip_of_its_first_last_and_evenly_spaced_frames():
    from solrl_core.grids import STRIP_FRAMES, frame_strip

    video = _video([10, 20, 30, 40, 50, 60, 70])
    strip = frame_strip(video)
    assert strip.shape == (8, STRIP_FRAMES * 8 + STRIP_FRAMES - 1, 3)
    assert [int(strip[4, 9 * i + 4, 0]) for i in range(STRIP_FRAMES)] == [10, 30, 50, 70]  # frames 0, 2, 4, 6
    assert int(strip[4, 8, 0]) == 255  # white between frames
    assert frame_strip(_flat(7)).shape == (8, 8, 3)  # an image stays as it is
    # in a grid each frame is as large as an image would be
    grid = labelled_grid([("a moving cat", [Tile(video, "best · 0.9"), None, Tile(_video([5] * 3), "worst · 0.1")])])
    corners = grid_layout([("a moving cat", [Tile(video, ""), None, Tile(_video([5] * 3), "")])]).rows[0][2]
    (x0, y0), (x1, _) = corners[0], corners[2]
    assert x1 - x0 >= STRIP_FRAMES * MIN_TILE
    assert [int(grid[y0 + MIN_TILE // 2, x0 + (MIN_TILE + 12) * i + MIN_TILE // 2, 0]) for i in range(4)] == [10, 30,
                                                                                                            50, 70]


def test_an_animated_grid_has_one_grid_per_frame_and_saves_as_a_looping_gif(tmp_path):
    from PIL import Image

    from solrl_core.grids import animated_grid, save_gif

    rows = [("a moving cat", [Tile(_video([10, 60, 110]), "best · 0.9"), None, Tile(_video([200, 150, 100]), "w")])]
    frames = animated_grid(rows)
    assert len(frames) == 3 and len({f.shape for f in frames}) == 1
    x, y = grid_layout([("a moving cat", [Tile(_flat(0), "")])]).rows[0][2][0]
    assert [int(f[y + MIN_TILE // 2, x + MIN_TILE // 2, 0]) for f in frames] == [10, 60, 110]
    save_gif(frames, tmp_path / "grid.gif", fps=4)
    with Image.open(tmp_path / "grid.gif") as gif:
        assert (gif.n_frames, gif.info["loop"], gif.info["duration"]) == (3, 0, 250)
    with pytest.raises(ValueError, match="one length"):
        animated_grid([("x", [Tile(_video([1, 2]), ""), Tile(_video([1, 2, 3]), "")])])


def test_an_edit_pools_rows_show_the_source_before_the_best_and_worst(pool):
    import zarr

    from solrl_core.edit_sources import SOURCE_ARRAY

    path, reward = pool
    sources = np.stack([_flat(200), _flat(220)])[:, None]  # one source per prompt
    zarr.open_group(str(path), mode="r+").create_array(SOURCE_ARRAY, data=sources)
    grids = top_bottom_grids(path, reward, 2, tile=MIN_TILE)
    tiles = [Tile(_flat(0), "")] + [None] + [Tile(_flat(0), "")] * 2 + [None] + [Tile(_flat(0), "")] * 2
    corners = grid_layout([("", tiles)]).rows[0][2]
    for prompt, source in ((0, 200), (1, 220)):
        levels = [int(grids[prompt][y + MIN_TILE // 2, x + MIN_TILE // 2, 0]) for x, y in corners]
        assert levels[0] == source and levels[2:4] == ([15, 25] if prompt == 0 else [45, 65])
    assert best_worst_grid(path, reward, n_prompts=2, n_show=2).shape[1] == grids[0].shape[1]
