"""explore.decode (solrl_core/models/explore_decode.py): which frames the explore decodes for the rewards it scores
with, what share of the decode that leaves, the samples it gives, and the configs it refuses."""

import numpy as np
import pytest
import torch

from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError
from solrl_core.frames import evenly_spaced
from solrl_core.models.backbones.registry import backbone_spec, backbone_specs
from solrl_core.config.decode_plan import decode_fraction, decode_plan
from solrl_core.models.explore_decode import DecodePlan, decode_samples

VIDEO = "configs/demo_video.yaml"
FIRST_FRAME = ["rewards={jpeg: 1.0}", "reward_models={jpeg: {video_frames: 1}}"]


def _video(*sets):
    return load_config(VIDEO, ["explore.decode.frames=scored", *sets])


def test_a_first_frame_reward_decodes_one_latent_frame_of_each_video_model():
    cfg = _video(*FIRST_FRAME)
    for spec in (s for s in backbone_specs() if s.defaults.frames is not None):
        plan = decode_plan(cfg, spec)
        assert (plan.latent_frames, plan.frames) == (1, 1), spec.key
        assert decode_fraction(cfg, spec) == pytest.approx(1 / spec.latent_frames), spec.key


@pytest.mark.parametrize("video_frames", [2, 3])
def test_rewards_that_read_the_last_frame_decode_every_frame(video_frames):
    """evenly spaced frames include the last; a video reward (the config's embedded_motion) reads every frame."""
    assert evenly_spaced(5, video_frames)[-1] == 4
    sets = ["rewards={embedded: 1.0}", f"reward_models={{embedded: {{video_frames: {video_frames}}}}}"]
    assert decode_plan(_video(*sets), backbone_spec("wan")) == DecodePlan()
    assert decode_plan(_video()) == DecodePlan() and decode_fraction(_video()) == 1.0


def test_the_scale_leaves_its_square():
    cfg = load_config(VIDEO, ["explore.decode.scale=0.5"])
    assert decode_plan(cfg) == DecodePlan(0.5) and decode_fraction(cfg) == 0.25
    both = _video(*FIRST_FRAME, "explore.decode.scale=0.5")
    assert decode_fraction(both, backbone_spec("wan")) == pytest.approx(0.25 / 2)


def test_decode_samples_keeps_the_shape_and_the_decoded_frames():
    """The embedded video model's latent is its frames: the first frame decoded alone is the full decode's, the
    others repeat it; at scale 0.5 the frames come back at full size, a 2x2 block average upsampled."""
    from solrl_core.models.backbones.embedded_video import EmbeddedVideoBackbone
    from solrl_core.config.schema import ModelConfig

    backbone = EmbeddedVideoBackbone.load(ModelConfig(kind="embedded_video"))
    latents = torch.rand(2, *backbone.latent_shape) * 2 - 1
    full = backbone.decode(latents)
    frames = backbone.frames
    first = decode_samples(backbone, latents, DecodePlan(1.0, 1, 1, frames))
    np.testing.assert_array_equal(first, np.repeat(full[:, :1], frames, axis=1))
    half = decode_samples(backbone, latents, DecodePlan(0.5))
    assert half.shape == full.shape and half.dtype == np.uint8
    assert 0 < np.abs(half.astype(int) - full).mean() < 64
    flat = latents.new_zeros(2, *backbone.latent_shape) + 0.25  # a flat video survives the round trip
    np.testing.assert_array_equal(decode_samples(backbone, flat, DecodePlan(0.5)), backbone.decode(flat))
    assert decode_samples(backbone, latents, None).tobytes() == full.tobytes()


@pytest.mark.parametrize("sets, words", [
    (["family=naive_scaling", "explore.precision=fp32", "regenerate.enabled=false", "explore.decode.scale=0.5"],
     "explore.decode is set, but naive_scaling trains on the explore samples"),
    (["explore.decode.scale=0"], "explore.decode.scale"),
    (["explore.decode.scale=1.5"], "explore.decode.scale"),
    (["explore.decode.frames=some"], "explore.decode.frames"),
])
def test_bad_decodes_are_refused_in_one_line(sets, words):
    with pytest.raises(ConfigError) as err:
        load_config(VIDEO, sets)
    assert words in str(err.value) and "\n" not in str(err.value).strip()


def test_scored_frames_of_an_image_model_are_refused():
    with pytest.raises(ConfigError, match="makes images; set explore.decode.frames: all"):
        load_config("configs/demo.yaml", ["explore.decode.frames=scored"])
