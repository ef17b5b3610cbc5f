"""Wan2.2-T2V-A14B text-to-video (Wan-AI/Wan2.2-T2V-A14B-Diffusers): two WanTransformer3DModel experts of Wan2.1-14B's
layout, `transformer` for the high-noise steps and `transformer_2` for the low-noise ones, switched where the timestep
falls below boundary_ratio x 1000 (0.875 in its model_index.json), as WanPipeline switches them
(solrl_core/models/backbones/wan22.py, solrl_core/models/experts.py). There is no official Sol-RL setting for it: the
rollout settings are Flow-Factory's published Wan2.2 LoRA GRPO recipe (X-GenGroup/Flow-Factory,
examples/grpo/lora/wan22/t2v.yaml), which trains LoRA on both experts (`target_components: ['transformer',
'transformer_2']`), with the 14B's targets, rank and quantization rule (solrl_core/models/backbones/specs/wan14b.py)."""

from dataclasses import replace

from solrl_core.models.backbones.spec import CoverageRow
from solrl_core.models.backbones.specs.wan14b import SPEC as WAN14B

EXPERTS = ("transformer", "transformer_2")  # WanPipeline's attributes: high noise, then low noise
RESOLUTION = 480

# Where this spec's preset values come from (the presets take them from here, solrl_core/config/presets.py;
# configs/parts/models/wan22.yaml holds the rest):
#   model.resolution = 480: Flow-Factory's Wan2.2 LoRA rollouts (`train.resolution: 480`; its evaluation: 720)
#   model.frames = 5: Flow-Factory's rollouts (`num_frames: 5`; its evaluation: 21)
#   model.max_sequence_length = 512: WanPipeline's default
#   quant.skip_names = [condition_embedder, proj_out]: chosen here, as the Wan 2.1 specs'
#   quant.min_width = 5120: chosen here: each expert's hidden width (the 14B's rule: attention kept, feed-forward in
#     4 bits), in both experts
#   train.lora_targets = null: the backbone's default: Flow-Factory's `target_modules: default` (attention and
#     feed-forward)
#   train.experts = null: both experts, Flow-Factory's `target_components: ['transformer', 'transformer_2']`
#   train.lora_rank = 64, train.lora_alpha = 128: Flow-Factory's Wan2.2 recipe
#   train.timestep_fraction = 0.6: chosen here (the Wan 2.1 specs')
#   train.micro_batch = 2: chosen here (Flow-Factory's per_device_batch_size is 1; at 480 px a pair's activations
#     are 2.6x the 14B's at 256 px: 1.65 GiB, solrl_core/planner/memory.py)
#   train.optimizer.grad_clip = 1.0: Flow-Factory's max_grad_norm
SPEC = replace(
    WAN14B,
    key="wan22",
    title="Wan2.2-T2V-A14B",
    kind="wan22",
    adapter="solrl_core.models.backbones.wan22:Wan22Backbone",
    order=62,
    defaults=replace(WAN14B.defaults, resolution=RESOLUTION),
    config_file="wan2.2-t2v-a14b.transformer.json",  # each expert's (the two share it)
    image_tokens=1800,  # 480 px, VAE f8 -> 60x60, 1x2x2 patches -> 900 tokens per latent frame, 2 latent frames
    latent_shape=(16, 2, 60, 60),  # 5 frames at 480 px
    coverage=(
        CoverageRow("wan2.2-t2v-a14b", "Wan2.2-T2V-A14B (each expert)", "no official setting: min width = its hidden "
                    "width 5120, in both experts (solrl_core/models/backbones/specs/wan22.py)", planner_key="wan22",
                    planner_note="no official Sol-RL setting: Flow-Factory's Wan2.2 LoRA GRPO rollouts (480 px, 5 "
                    "frames), the quantization rule chosen here; two experts, one per step"),
    ),
    aliases=("wan2.2-t2v-a14b", "wan-a14b", "wan2.2-a14b"),
    path_marker=None,
    micro_batch=2,
    experts=EXPERTS,
    trained_experts=EXPERTS,
    tiny_maker="solrl_core.models.backbones.tiny.wan:make_tiny_wan22",
    settings=("Flow-Factory's published Wan2.2 LoRA GRPO settings and choices made here, as "
              "solrl_core/models/backbones/specs/wan22.py says (there is no official Sol-RL setting for a video "
              "model)"),
)
