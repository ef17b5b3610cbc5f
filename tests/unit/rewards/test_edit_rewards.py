"""Rewards that score edits (`Reward.edits`): each sees the edited image, its instruction and its source image(s).
The embedded world's programmatic reward prefers an edit's answer to its unchanged source; CLIP edit is its two
cosines on a tiny CLIP; the VLM edit judge shows the source, then the result, with the instruction; a reward that
scores edits refuses to score without sources."""

from __future__ import annotations

import base64
import io
import math

import numpy as np
import pytest
import torch
from PIL import Image

from chat_standin import ChatStandIn
from local_servers import serving
from solrl_core.errors import SolrlError
from solrl_core.rewards.chat_judge import EDIT_TEMPLATE
from solrl_core.rewards.registry import REWARDS, clear_reward_cache, get_reward
from solrl_core.rewards.tiny import write_tiny_clip
from solrl_core.worlds import edits as edit_world

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def fresh_rewards():
    clear_reward_cache()
    yield
    clear_reward_cache()


@pytest.fixture(scope="module")
def pairs():
    """(sources (B, 1, H, W, 3), targets (B, H, W, 3), prompts) of held-out edits of every kind."""
    edits = edit_world.test_edits()[::12]
    rng = np.random.default_rng(0)
    rendered = [edit_world.render_pair(edit, rng) for edit in edits]
    sources = np.stack([s for s, _ in rendered])[:, None]
    return sources, np.stack([t for _, t in rendered]), [edit.prompt for edit in edits]


def test_the_registry_marks_the_rewards_that_score_edits():
    assert {name for name, cls in REWARDS.items() if cls.edits} == {"embedded_edit", "clip_edit", "chat_edit_judge"}


def test_the_embedded_edit_reward_prefers_the_edit_to_its_unchanged_source(pairs):
    sources, targets, prompts = pairs
    reward = get_reward("embedded_edit")
    answered = reward(targets, prompts, sources=sources)
    unchanged = reward(sources[:, 0], prompts, sources=sources)
    assert len({p.split(": ")[1].split()[0] for p in prompts}) == 3  # make / turn / move: every kind of instruction
    assert answered.min() > 0.8 and unchanged.max() < 0.6 and (answered > unchanged).all()
    with pytest.raises(SolrlError, match="reward embedded_edit scores edits: it needs the prompts' source images"):
        reward(targets, prompts)


def test_clip_edit_is_the_mean_of_the_direction_and_the_source_similarity(tmp_path, pairs):
    sources, targets, prompts = pairs
    path = write_tiny_clip(tmp_path / "clip", 1, "quick_gelu", math.log(100.0))
    reward = get_reward("clip_edit", {"clip_edit": {"path": str(path)}})
    clip = get_reward("clipscore", {"clipscore": {"path": str(path)}})
    with torch.no_grad():
        edited, text = clip.embeddings(targets, prompts)
        source, _ = clip.embeddings(sources[:, 0], prompts)
    change = edited - source
    direction = (change * text).sum(-1) / change.norm(dim=-1)
    expected = ((direction + (edited * source).sum(-1)) / 2).numpy()
    np.testing.assert_allclose(reward(targets, prompts, sources=sources), expected, rtol=1e-5, atol=1e-6)
    # the source left as it was: all of it kept, no change in any direction
    np.testing.assert_allclose(reward(sources[:, 0], prompts, sources=sources), 0.5, atol=1e-5)


def _images_of(request: dict) -> list[np.ndarray]:
    urls = [part["image_url"]["url"] for part in request["messages"][0]["content"] if part["type"] == "image_url"]
    return [np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB"))
            for url in urls]


def test_the_vlm_edit_judge_shows_the_source_then_the_result_with_the_instruction(pairs):
    sources, targets, prompts = pairs
    standin = ChatStandIn(answer=lambda image, question, body: "7")
    with serving(standin.app()) as url:
        reward = get_reward("chat_edit_judge", {"chat_edit_judge": {"endpoint": f"{url}/v1", "batch_size": 4}})
        scores = reward(targets[:4], prompts[:4], sources=sources[:4])
    assert scores.tolist() == [6 / 9] * 4  # 7 on the 1..10 scale
    asked = {request["messages"][0]["content"][-1]["text"]: _images_of(request) for request in standin.requests}
    assert set(asked) == {EDIT_TEMPLATE.replace("{prompt}", prompt) for prompt in prompts[:4]}
    for i, prompt in enumerate(prompts[:4]):
        source, result = asked[EDIT_TEMPLATE.replace("{prompt}", prompt)]
        np.testing.assert_array_equal(source, sources[i, 0])
        np.testing.assert_array_equal(result, targets[i])
