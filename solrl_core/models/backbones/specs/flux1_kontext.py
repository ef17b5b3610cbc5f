"""FLUX.1 Kontext [dev] (black-forest-labs/FLUX.1-Kontext-dev): FLUX.1-dev's transformer reading a source image's
tokens beside the generated image's (solrl_core/models/backbones/flux_kontext.py). There is no official Sol-RL setting
for it; its transformer is FLUX.1-dev's architecture (the same config.json values), so FLUX.1-dev's official settings
apply as they are (solrl_core/models/backbones/specs/flux1.py). Its presets (configs/parts/models/flux1-kontext.yaml)
add Flow-Factory's guidance 2.5 and an edit prompt set of your own, and train on the rewards that score edits.

The planner and the coverage report count its forward with the source's tokens after the image's (the adapter's
`meta_inputs`): twice FLUX.1-dev's 1,024 image tokens at 512 px, so about twice its attention and more than its
Linear FLOPs per step. `image_tokens` stays the generated image's. The source's VAE encode (once per prompt) is
not counted."""

from dataclasses import replace

from solrl_core.models.backbones.spec import CoverageRow
from solrl_core.models.backbones.specs.flux1 import SPEC as FLUX1

SPEC = replace(
    FLUX1,
    key="flux1-kontext",
    title="FLUX.1-Kontext-dev",
    kind="flux1-kontext",
    adapter="solrl_core.models.backbones.flux_kontext:FluxKontextBackbone",
    order=11,
    edits=True,
    coverage=(CoverageRow("flux1-kontext-dev", "FLUX.1-Kontext-dev", "official (FLUX.1-dev's rule)",
                          planner_key="flux1-kontext", planner_note="FLUX.1-dev's official settings; the source's "
                          "tokens beside the image's"),),
    aliases=("kontext", "flux-kontext", "flux.1-kontext-dev"),
    settings=("FLUX.1-dev's official settings (docs/method.md, the same transformer) with Flow-Factory's guidance, as "
              "solrl_core/models/backbones/specs/flux1_kontext.py and configs/parts/models/flux1-kontext.yaml say "
              "(there is no official Sol-RL setting for FLUX.1 Kontext)"),
    tiny_maker="solrl_core.models.backbones.tiny.flux:make_tiny_flux_kontext",
)
