"""Stable Diffusion 3.5 Medium. docs/method.md has no official setting for it: SD3.5-Large's (the same adapter and
trainer), except the min width (SD3.5-M's hidden size, as 2432 is SD3.5-L's) and a micro-batch sized for the smaller
model."""

from dataclasses import replace

from solrl_core.models.backbones.spec import CoverageRow
from solrl_core.models.backbones.specs.sd35l import SPEC as LARGE

SPEC = replace(
    LARGE,
    key="sd35m",
    title="SD3.5-Medium",
    order=30,
    defaults=replace(LARGE.defaults, quant_min_width=1536),
    config_file="sd35-medium.transformer.json",
    coverage=(
        CoverageRow(
            "sd35-medium", "SD3.5-Medium",
            "no official setting: SD3.5-L's skip names, min width = its hidden size 1536 (as 2432 is SD3.5-L's); "
            "min width 2432 gives the same split",
            planner_key="sd35m",
            planner_note="no official Sol-RL setting: SD3.5-L's skip names, timestep fraction and resolution",
        ),
    ),
    aliases=("sd35-medium", "sd3.5-medium"),
    path_marker="medium",
    micro_batch=8,
    settings=("SD3.5-Large's official settings (docs/method.md) and choices made here, as configs/parts/models/"
              "sd35m.yaml says (there is no official Sol-RL setting for SD3.5-Medium)"),
    tiny_maker="solrl_core.models.backbones.tiny.sd3:make_tiny_sd35m",
)
