"""Wan 2.1 text-to-video, 14B: the model Flow-Factory's published Wan 2.1 GRPO recipe trains (X-GenGroup/Flow-Factory,
examples/grpo/lora/wan21/t2v.yaml, whose rollout settings the 1.3B's spec already carries). The same adapter and
settings as the 1.3B (solrl_core/models/backbones/specs/wan.py), except the min width: the 14B's hidden width 5120
(40 heads x 128, Wan-Video/Wan2.1 wan/configs/wan_t2v_14B.py), so that, as in the 1.3B, the attention stays in high
precision and the feed-forward goes to 4 bits; and a micro-batch chosen here for the larger model. A config names it
by its model.path (the spec's path_marker "14b")."""

from dataclasses import replace

from solrl_core.models.backbones.spec import CoverageRow
from solrl_core.models.backbones.specs.wan import SPEC as SMALL

WIDTH = 5120

# Where this spec's preset values come from (the presets take them from here, solrl_core/config/presets.py;
# configs/parts/models/wan14b.yaml holds the rest):
#   model.resolution = 256: Flow-Factory's rollouts (its evaluation: 480)
#   model.frames = 5: Flow-Factory's rollouts (its evaluation: 13)
#   model.max_sequence_length = 512: WanPipeline's default, Flow-Factory's and UniRL's
#   quant.skip_names = [condition_embedder, proj_out]: chosen here: the time and text embedders and the output
#     projection
#   quant.min_width = 5120: chosen here: the hidden width, as SD3.5-L's 2432 (attention kept, feed-forward in 4 bits)
#   train.lora_targets = null: the backbone's default: Flow-Factory's (attention and feed-forward)
#   train.lora_rank = 64: Flow-Factory
#   train.lora_alpha = 128: Flow-Factory
#   train.timestep_fraction = 0.6: chosen here (SD3.5's and SANA's)
#   train.micro_batch = 4: chosen here (SD3.5-L's)
#   train.optimizer.grad_clip = 1.0: Flow-Factory's max grad norm
SPEC = replace(
    SMALL,
    key="wan14b",
    title="Wan2.1-T2V-14B",
    order=61,
    defaults=replace(SMALL.defaults, quant_min_width=WIDTH),
    config_file="wan2.1-t2v-14b.transformer.json",
    coverage=(
        CoverageRow("wan2.1-t2v-14b", "Wan2.1-T2V-14B", "no official setting: min width = its hidden width 5120 "
                    "(solrl_core/models/backbones/specs/wan14b.py)", planner_key="wan14b",
                    planner_note="no official Sol-RL setting: Flow-Factory's Wan 2.1 GRPO rollouts (256 px, 5 frames), "
                    "the quantization rule chosen here"),
    ),
    aliases=("wan2.1-t2v-14b", "wan-14b"),
    path_marker="14b",
    micro_batch=4,
    tiny_maker=None,  # the 1.3B's tiny (`solrl make-tiny wan`) is the same architecture
    settings=("Flow-Factory's published Wan 2.1 GRPO settings and choices made here, as "
              "solrl_core/models/backbones/specs/wan14b.py says (there is no official Sol-RL setting for a video "
              "model)"),
)
