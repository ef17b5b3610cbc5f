"""Stable Diffusion 3.5 Medium. docs/method.md has no official setting for it: SD3.5-Large's (the same adapter and
trainer), except the min width (SD3.5-M's hidden size, as 2432 is SD3.5-L's) and a micro-batch sized for the smaller
model."""

from dataclasses import replace

from solrl_core.models.backbones.spec import CoverageRow
from solrl_core.models.backbones.specs.sd35l import SPEC as LARGE

# Where this spec's preset values come from (the presets take them from here, solrl_core/config/presets.py;
# configs/parts/models/sd35m.yaml holds the rest):
#   model.max_sequence_length = 128: as SD3.5-L (also DiffusionNFT's SD3.5-M runs: scripts/train_nft_sd3.py)
#   quant.min_width = 1536: not official (SD3.5-L: 2432 = its width); 2432 here gives the same split
#   train.lora_targets = null: the backbone's default, as SD3.5-L
#   train.micro_batch = 8: not official (SD3.5-L: 4)
#   train.optimizer.grad_clip = 0.002: as SD3.5-L (the same SD3 trainer; DiffusionNFT's SD3.5-M runs clip at 1.0)
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
    settings=("SD3.5-Large's official settings (docs/method.md) and choices made here, as "
              "solrl_core/models/backbones/specs/sd35m.py says (there is no official Sol-RL setting for SD3.5-Medium)"),
    tiny_maker="solrl_core.models.backbones.tiny.sd3:make_tiny_sd35m",
)
