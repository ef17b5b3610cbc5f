"""Qwen-Image-Edit (Qwen/Qwen-Image-Edit): Qwen-Image's transformer reading the source image's tokens beside the
generated image's, its Qwen2.5-VL text encoder shown the source with the instruction
(solrl_core/models/backbones/qwenimage_edit.py). The same architecture as Qwen-Image, so Qwen-Image's settings
(solrl_core/models/backbones/specs/qwenimage.py, from the peers' published Qwen-Image configs), but for the text
length. Its presets (configs/parts/models/qwenimage-edit.yaml) train on an edit prompt set of your own and the
rewards that score edits.

model.max_sequence_length = 512, not Qwen-Image's 256: Qwen2.5-VL reads the source with the instruction, and at
512 px its processor makes 18 x 18 = 324 tokens of the source (28 px per merged patch) before the instruction's, so
256 refuses every edit; 512 leaves ~180 tokens for the instruction (chosen here, no peer trains at 512 px).

The planner and the coverage report count its forward with the source's tokens after the image's (the adapter's
`meta_inputs`): twice Qwen-Image's 1,024 image tokens at 512 px, and 512 text tokens. `image_tokens` stays the
generated image's. The source's encodes (VAE and Qwen2.5-VL, once per prompt) are not counted."""

from dataclasses import replace

from solrl_core.models.backbones.spec import CoverageRow
from solrl_core.models.backbones.specs.qwenimage import SPEC as QWEN

MAX_SEQUENCE_LENGTH = 512  # the source's 324 Qwen2.5-VL tokens at 512 px and the instruction's (docstring)

SPEC = replace(
    QWEN,
    key="qwenimage-edit",
    title="Qwen-Image-Edit",
    kind="qwenimage-edit",
    adapter="solrl_core.models.backbones.qwenimage_edit:QwenImageEditBackbone",
    order=51,
    edits=True,
    defaults=replace(QWEN.defaults, max_sequence_length=MAX_SEQUENCE_LENGTH),
    text_tokens=MAX_SEQUENCE_LENGTH,
    coverage=(CoverageRow("qwen-image-edit", "Qwen-Image-Edit", "no official setting: Qwen-Image's rule",
                          planner_key="qwenimage-edit", planner_note="Qwen-Image's settings; the source's tokens "
                          "beside the image's, and its 324 Qwen2.5-VL tokens in the text"),),
    aliases=("qwen-image-edit",),
    settings=("Qwen-Image's settings (the same transformer) with 512 text tokens, as "
              "solrl_core/models/backbones/specs/qwenimage_edit.py and configs/parts/models/qwenimage-edit.yaml say "
              "(there is no official Sol-RL setting for Qwen-Image-Edit)"),
    tiny_maker="solrl_core.models.backbones.tiny.qwenimage:make_tiny_qwenimage_edit",
)
