"""The embedded editing world's programmatic reward (the world: solrl_core/worlds/edits.py): an edited image scored
against its source and its edit, in [0, 1], with its parts.

  follow   the target scene's prompt match (solrl_core/rewards/embedded.py), which also checks that what the
           instruction does not name (colour, shape, count) kept its source value
  layout   where the objects are: the source's foreground box kept (colour and shape edits: every shape of the world
           fills the same box), the prompt-match reward's position component at full weight (position edits), or
           free (count edits: 1)
reward = follow^0.7 x layout^0.3 (each floored at 1e-4): an image that is not the edit (the source unchanged, another
edit's answer) scores low on one or the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solrl_core.rewards.base import Reward
from solrl_core.rewards.embedded import foreground_box, position_score, prompt_match_reward
from solrl_core.worlds.edits import Edit, edit_of_prompt

LAYOUT_WEIGHT = 0.3  # of the layout kept, in the reward's weighted geometric mean (the target's match: the rest)
_EDGE_SCALE = 0.05  # the mean move of the foreground box's edges, as a fraction of the side, that costs a factor e
FLOOR = 1e-4


def layout_kept(source: np.ndarray, edited: np.ndarray) -> float:
    """How much of the source's layout the edited image keeps, in [0, 1]: exp(-the mean move of the foreground
    box's four edges / (0.05 x side)). Every shape of the world fills the same box at the same place and size, so a
    shape edit that keeps the layout keeps the box."""
    before, after = foreground_box(source), foreground_box(edited)
    if before is None or after is None:
        return 0.0
    moved = float(np.mean(np.abs(np.subtract(after, before)))) / source.shape[0]
    return float(np.exp(-moved / _EDGE_SCALE))


def layout_score(source: np.ndarray, edited: np.ndarray, edit: Edit) -> float:
    """Where the objects are: kept (colour and shape edits: `layout_kept`), moved as asked (position edits:
    the prompt-match reward's position component, at full weight here), or free (count edits: 1)."""
    if edit.keeps_layout:
        return layout_kept(source, edited)
    return position_score(edited, edit.value) if edit.kind == "position" else 1.0


def edit_match_reward(sources: np.ndarray, edited: np.ndarray, edits: Sequence[Edit]) -> dict[str, np.ndarray]:
    """Reward of edited uint8 images (B, H, W, 3) given their sources and edits: {"reward", "follow" (the target
    scene's prompt match), "layout" (`layout_score`)}, each (B,) in [0, 1]. reward = follow^0.7 x layout^0.3 (each
    floored at 1e-4): an image that is not the edit (the source unchanged, say) scores low on one or the other."""
    if not (len(sources) == len(edited) == len(edits)):
        raise ValueError(f"{len(sources)} sources, {len(edited)} edited images and {len(edits)} edits")
    follow = prompt_match_reward(edited, [edit.target.prompt for edit in edits])["reward"]
    layout = np.array([layout_score(s, e, edit) for s, e, edit in zip(sources, edited, edits)], dtype=np.float64)
    reward = np.exp((1 - LAYOUT_WEIGHT) * np.log(np.maximum(follow, FLOOR))
                    + LAYOUT_WEIGHT * np.log(np.maximum(layout, FLOOR)))
    return {"reward": reward, "follow": follow, "layout": layout}


def edit_prompts_reward(edited: np.ndarray, prompts: Sequence[str], sources: np.ndarray) -> dict[str, np.ndarray]:
    """`edit_match_reward` of edited images given their edit prompts (`Edit.prompt`) and sources (B, H, W, 3)."""
    return edit_match_reward(sources, edited, [edit_of_prompt(p) for p in prompts])


class EmbeddedEditReward(Reward):
    """`edit_match_reward` as a reward: each prompt an edit prompt of the world (`Edit.prompt`), scored against its
    source image."""

    name = "embedded_edit"
    summary = ("edits of the embedded editing world: the target's prompt match and the source's layout kept, against "
               "the source image, in [0, 1]")
    edits = True

    def score_batch(self, images: np.ndarray, prompts: list[str], sources: np.ndarray | None = None) -> np.ndarray:
        return edit_prompts_reward(images, prompts, sources[:, 0])["reward"]
