"""The embedded video model (solrl_core/models/embedded/video_model.py) and its adapter (model.kind embedded_video):
videos as latents, the transformer called as WanTransformer3DModel is, save/load, and the one-line refusals."""

import numpy as np
import pytest
import torch

from solrl_core.config.schema import ModelConfig
from solrl_core.errors import SolrlError
from solrl_core.models.backbones import registry
from solrl_core.models.backbones.embedded_video import PRETRAINED_VIDEO_DIR, EmbeddedVideoBackbone
from solrl_core.worlds import motion
from solrl_core.models.embedded.model import build_model, load_model
from solrl_core.models.embedded.video_model import (TEXT_SCALES, build_video_model, latents_to_videos,
                                                    position_channels, predict_video_velocity, transformer_config,
                                                    videos_to_latents)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest: 2 spinning OpenMP threads stall on a busy machine
PROMPTS = ["a red circle moving left", "a blue square moving up"]
# The shipped weights, on every held-out prompt x 8 seeds (docs/lab/video-world-2026-11-30c.md): a prompt's and its
# opposite's samples from the same noises 0.87 +- 0.03 travels apart (an untrained model's 0.000), motion part 0.348
# (untrained 0.135); the bounds leave room for the 2 seeds drawn here.
APART_AT_LEAST = 0.4
MOTION_ABOVE_UNTRAINED = 0.1


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A randomly initialised video model and an image model, saved."""
    root = tmp_path_factory.mktemp("embedded_video")
    build_video_model(seed=0).save(root / "video")
    build_model(seed=0).save(root / "image")
    return root


def test_the_video_model_round_trips_and_samples_videos(saved):
    backbone = registry.load_backbone(ModelConfig(kind="embedded_video", path=str(saved / "video")))
    assert isinstance(backbone, EmbeddedVideoBackbone) and backbone.frames == motion.FRAMES
    assert backbone.latent_shape == (3, motion.FRAMES, 32, 32)
    assert backbone.model.metadata["frames"] == motion.FRAMES
    linears = [m for m in backbone.transformer.modules() if isinstance(m, torch.nn.Linear)]
    assert all(m.in_features % 16 == 0 and m.out_features % 16 == 0 for m in linears)  # NVFP4's 1x16 blocks
    x = backbone.initial_noise([3, 4])
    assert x.shape == (2, 3, motion.FRAMES, 32, 32)
    cond = backbone.encode_prompts(PROMPTS)
    sigma = torch.full((1,), 0.7)
    assert cond["pooled_projections"].shape == (2, TEXT_SCALES)  # the text encoder's projection: two scales
    inputs = torch.cat([x, position_channels(x, cond["pooled_projections"])], dim=1)
    direct = backbone.transformer(hidden_states=inputs, encoder_hidden_states=cond["encoder_hidden_states"],
                                  timestep=torch.full((2,), 700.0), return_dict=False)[0]
    torch.testing.assert_close(backbone.velocity(backbone.transformer, x, sigma, cond), direct)
    torch.testing.assert_close(predict_video_velocity(backbone.transformer, x, sigma, cond), direct)
    videos = motion.render_batch(PROMPTS, np.random.default_rng(0))
    assert np.array_equal(backbone.decode(videos_to_latents(videos)), videos)  # pixels are the latents
    assert np.array_equal(latents_to_videos(videos_to_latents(videos)), videos)


def test_the_position_channels_are_the_coordinates_and_their_text_scaled_products():
    """Frame, row, column from -1 to 1; frame x column scaled by the prompt's first scale, frame x row by its second:
    the word moves the input in opposite directions at the clip's two ends and the frame's two sides."""
    x = torch.zeros(2, 3, 4, 8, 6)
    scales = torch.tensor([[2.0, 0.0], [0.0, -3.0]])
    channels = position_channels(x, scales)
    assert channels.shape == (2, 5, 4, 8, 6)
    frame, row, column = (torch.linspace(-1, 1, n) for n in (4, 8, 6))
    for b in range(2):
        torch.testing.assert_close(channels[b, 0], frame.view(4, 1, 1).expand(4, 8, 6))
        torch.testing.assert_close(channels[b, 1], row.view(1, 8, 1).expand(4, 8, 6))
        torch.testing.assert_close(channels[b, 2], column.view(1, 1, 6).expand(4, 8, 6))
    assert channels[0, 3, 0, 0, 0] == 2.0 and channels[0, 3, 0, 0, -1] == -2.0 and channels[0, 3, -1, 0, -1] == 2.0
    assert channels[0, 4].abs().max() == 0 and channels[1, 3].abs().max() == 0
    assert channels[1, 4, 0, 0, 0] == -3.0 and channels[1, 4, -1, 0, 0] == 3.0 and channels[1, 4, -1, -1, 0] == -3.0


def test_weights_without_the_position_channels_are_refused_in_one_line(tmp_path):
    from diffusers import WanTransformer3DModel

    old = build_video_model(seed=0)
    old.transformer = WanTransformer3DModel(**{**transformer_config(), "in_channels": 3})
    old.save(tmp_path / "old")
    with pytest.raises(SolrlError, match=r"its transformer takes 3 input channels, this solrl's takes 8 .*"
                                         r"solrl pretrain --world motion"):
        registry.load_backbone(ModelConfig(kind="embedded_video", path=str(tmp_path / "old")))


def test_a_model_of_the_other_kind_or_frames_is_refused_in_one_line(saved):
    with pytest.raises(SolrlError, match="holds an embedded image model; model.kind embedded_video needs a video one"):
        registry.load_backbone(ModelConfig(kind="embedded_video", path=str(saved / "image")))
    with pytest.raises(SolrlError, match="holds an embedded video model; set model.kind: embedded_video"):
        registry.load_backbone(ModelConfig(kind="embedded", path=str(saved / "video")))
    with pytest.raises(SolrlError, match=r"model.frames 8: the embedded video model makes 4-frame videos"):
        registry.load_backbone(ModelConfig(kind="embedded_video", path=str(saved / "video"), frames=8))


def test_the_shipped_video_model_draws_the_prompted_shapes_and_moves_them_the_named_way():
    """The weights in solrl_core/models/embedded/pretrained_video/ (solrl pretrain --world motion) draw the prompt's
    shape and colour on held-out prompts far better than an untrained model, and move it the way the prompt names: from
    the same noises, a prompt and its opposite direction move the shape apart (an untrained model's, or the previous
    weights', do not: docs/lab/video-world-2026-11-30c.md)."""
    from solrl_core.lab.embedded_pretrain import sample_rewards
    from solrl_core.rewards.embedded_motion import _moved, motion_match_reward

    prompts = motion.test_prompts()
    opposite = {d: e for d, (dx, dy) in motion.DIRECTIONS.items() for e, step in motion.DIRECTIONS.items()
                if step == (-dx, -dy)}
    turned = [p.rsplit(" ", 1)[0] + " " + opposite[motion.parse_prompt(p).direction] for p in prompts]
    rows = [p for p in prompts for _ in range(2)]
    scores, apart = {}, {}
    for name, model in (("untrained", build_video_model(seed=0)), ("shipped", load_model(PRETRAINED_VIDEO_DIR))):
        videos, _ = sample_rewards(model, prompts, [0, 1], steps=10, world_name="motion")
        turned_videos, _ = sample_rewards(model, turned, [0, 1], steps=10, world_name="motion")
        scores[name] = motion_match_reward(videos, rows)
        along = [motion.parse_prompt(p).direction for p in rows]
        moves = [(_moved(a, d), _moved(b, d)) for a, b, d in zip(videos, turned_videos, along)]
        apart[name] = np.mean([a - b for a, b in moves if a is not None and b is not None])
    assert scores["shipped"]["appearance"].mean() > 2 * scores["untrained"]["appearance"].mean()
    assert scores["shipped"]["reward"].mean() > 1.5 * scores["untrained"]["reward"].mean()
    assert apart["shipped"] > APART_AT_LEAST and abs(apart["untrained"]) < APART_AT_LEAST / 2
    assert scores["shipped"]["motion"].mean() > scores["untrained"]["motion"].mean() + MOTION_ABOVE_UNTRAINED
