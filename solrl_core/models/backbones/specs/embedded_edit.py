"""The embedded editing model shipped with solrl (solrl_core/models/embedded/edit_model.py): the embedded image model
that also sees the source image. The image model's settings (solrl_core/models/backbones/specs/embedded.py)."""

from dataclasses import replace

from solrl_core.models.backbones.specs.embedded import SPEC as IMAGE

SPEC = replace(
    IMAGE,
    key="embedded_edit",
    title="embedded editing model",
    kind="embedded_edit",
    adapter="solrl_core.models.backbones.embedded_edit:EmbeddedEditBackbone",
    order=2,
    edits=True,
)
