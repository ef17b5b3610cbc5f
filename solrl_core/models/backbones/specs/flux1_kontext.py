"""FLUX.1 Kontext [dev] (black-forest-labs/FLUX.1-Kontext-dev): FLUX.1-dev's transformer reading a source image's
tokens beside the generated image's (solrl_core/models/backbones/flux_kontext.py). There is no official Sol-RL setting
for it; its transformer is FLUX.1-dev's architecture (the same config.json values), so FLUX.1-dev's official settings
apply as they are (solrl_core/models/backbones/specs/flux1.py). No preset part yet: a Kontext preset needs an edit
prompt set."""

from dataclasses import replace

from solrl_core.models.backbones.specs.flux1 import SPEC as FLUX1

SPEC = replace(
    FLUX1,
    key="flux1-kontext",
    title="FLUX.1-Kontext-dev",
    kind="flux1-kontext",
    adapter="solrl_core.models.backbones.flux_kontext:FluxKontextBackbone",
    order=11,
    edits=True,
    config_file=None,  # the planner and coverage rows of an editing model (twice the image tokens) are not made yet
    coverage=(),
    aliases=("kontext", "flux-kontext", "flux.1-kontext-dev"),
    settings="no official Sol-RL setting: FLUX.1-dev's official settings (the same transformer)",
    tiny_maker="solrl_core.models.backbones.tiny.flux:make_tiny_flux_kontext",
)
