"""Qwen-Image-Edit (Qwen/Qwen-Image-Edit): Qwen-Image's transformer reading the source image's tokens beside the
generated image's, its Qwen2.5-VL text encoder shown the source with the instruction
(solrl_core/models/backbones/qwenimage_edit.py). The same architecture as Qwen-Image, so Qwen-Image's settings
(solrl_core/models/backbones/specs/qwenimage.py, from the peers' published Qwen-Image configs). No preset part yet: an
edit preset needs an edit prompt set."""

from dataclasses import replace

from solrl_core.models.backbones.specs.qwenimage import SPEC as QWEN

SPEC = replace(
    QWEN,
    key="qwenimage-edit",
    title="Qwen-Image-Edit",
    kind="qwenimage-edit",
    adapter="solrl_core.models.backbones.qwenimage_edit:QwenImageEditBackbone",
    order=51,
    edits=True,
    config_file=None,  # the planner and coverage rows of an editing model (twice the image tokens) are not made yet
    coverage=(),
    aliases=("qwen-image-edit",),
    settings="no official Sol-RL setting: Qwen-Image's settings (the same transformer)",
    tiny_maker="solrl_core.models.backbones.tiny.qwenimage:make_tiny_qwenimage_edit",
)
