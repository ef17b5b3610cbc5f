"""The embedded video model shipped with solrl (solrl_core/models/embedded/video_model.py): moving shapes, 4 frames of
32 px, for comparing methods on video in minutes on a CPU (configs/demo_video.yaml). Like the image model it has no
full-size model, coverage row, planner shapes, tiny maker or preset part."""

from solrl_core.models.backbones.spec import BackboneDefaults, BackboneSpec
from solrl_core.models.backbones.specs.wan import DEFAULTS as WAN

# the video transformer's hidden width (solrl_core/models/embedded/video_model.py builds it from here): at least the
# 8 x 8 x 3 = 192 pixels of a patch, which its output layer must be able to give back
WIDTH = 192

SPEC = BackboneSpec(
    key="embedded_video",
    title="embedded video",
    kind="embedded_video",
    adapter="solrl_core.models.backbones.embedded_video:EmbeddedVideoBackbone",
    order=1,
    defaults=BackboneDefaults(
        # the attention projections of Wan's blocks (self and cross), as the image model's are its attention's
        lora_targets=[t for t in WAN.lora_targets if t.startswith("attn")],
        # Wan's: the time and text embedders and the output projection
        quant_skip_names=WAN.quant_skip_names,
        # the image model's rule: the hidden width, so the attention stays in high precision and the feed-forward
        # goes to 4 bits
        quant_min_width=WIDTH,
        frames=4,  # the shipped weights' (pretrained_video/solrl_embedded.json)
    ),
    shipped=True,
    causal_decoder=True,  # its latent is the frames themselves
    fixed_resolution=True,  # defaults.resolution = 32: the shipped weights'
)
