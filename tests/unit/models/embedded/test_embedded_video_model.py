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
from solrl_core.models.embedded.video_model import (build_video_model, latents_to_videos, predict_video_velocity,
                                                    videos_to_latents)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest: 2 spinning OpenMP threads stall on a busy machine
PROMPTS = ["a red circle moving left", "a blue square moving up"]


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
    direct = backbone.transformer(hidden_states=x, encoder_hidden_states=cond["encoder_hidden_states"],
                                  timestep=torch.full((2,), 700.0), return_dict=False)[0]
    torch.testing.assert_close(backbone.velocity(backbone.transformer, x, sigma, cond), direct)
    torch.testing.assert_close(predict_video_velocity(backbone.transformer, x, sigma, cond), direct)
    videos = motion.render_batch(PROMPTS, np.random.default_rng(0))
    assert np.array_equal(backbone.decode(videos_to_latents(videos)), videos)  # pixels are the latents
    assert np.array_equal(latents_to_videos(videos_to_latents(videos)), videos)


def test_a_model_of_the_other_kind_or_frames_is_refused_in_one_line(saved):
    with pytest.raises(SolrlError, match="holds an embedded image model; model.kind embedded_video needs a video one"):
        registry.load_backbone(ModelConfig(kind="embedded_video", path=str(saved / "image")))
    with pytest.raises(SolrlError, match="holds an embedded video model; set model.kind: embedded_video"):
        registry.load_backbone(ModelConfig(kind="embedded", path=str(saved / "video")))
    with pytest.raises(SolrlError, match=r"model.frames 8: the embedded video model makes 4-frame videos"):
        registry.load_backbone(ModelConfig(kind="embedded_video", path=str(saved / "video"), frames=8))


def test_the_shipped_video_model_draws_the_prompted_shapes():
    """The weights in solrl_core/models/embedded/pretrained_video/ (solrl pretrain --world motion) draw the prompt's
    shape and colour on held-out prompts far better than an untrained model; they barely move it yet (the motion
    term stays near a still video's), which is what RL on the motion reward has to teach."""
    from solrl_core.lab.embedded_pretrain import sample_rewards
    from solrl_core.rewards.embedded_motion import motion_match_reward

    prompts = motion.test_prompts()
    scores = {}
    for name, model in (("untrained", build_video_model(seed=0)), ("shipped", load_model(PRETRAINED_VIDEO_DIR))):
        videos, _ = sample_rewards(model, prompts, [0, 1], steps=10, world_name="motion")
        scores[name] = motion_match_reward(videos, [p for p in prompts for _ in range(2)])
    assert scores["shipped"]["appearance"].mean() > 2 * scores["untrained"]["appearance"].mean()
    assert scores["shipped"]["reward"].mean() > 1.5 * scores["untrained"]["reward"].mean()
