"""Wan 2.1 text-to-video, 1.3B (diffusers WanTransformer3DModel). There is no official Sol-RL setting for a video
model: the rollout settings are Flow-Factory's published Wan 2.1 GRPO recipe (X-GenGroup/Flow-Factory,
examples/grpo/lora/wan21/t2v.yaml: 256 px, 5 frames, 10 steps, CFG 5.0, flow_shift 3.0, LoRA rank 64 / alpha 128,
max grad norm 1.0) and its default LoRA targets (src/flow_factory/models/wan/wan2_t2v.py); the quantization rule is
chosen here as SD3.5-Large's is (min width = the hidden width, so the attention stays in high precision and the
feed-forward goes to 4 bits; the time and text embedders and the output projection are kept)."""

from solrl_core.models.backbones.spec import BackboneDefaults, BackboneSpec, CoverageRow, TokenLayout

WIDTH = 1536  # Wan2.1-T2V-1.3B's hidden width: 12 heads x 128 (Wan-Video/Wan2.1 wan/configs/wan_t2v_1_3B.py)

# Wan's transformer by its layer names: the timestep embedder runs once per sample; the UMT5 states go through the
# text embedder and the cross-attention's keys and values; every other layer sees the video's tokens.
TOKENS = TokenLayout(sample=("condition_embedder.time_embedder", "condition_embedder.time_proj"),
                     text=("condition_embedder.text_embedder", "attn2.to_k", "attn2.to_v"))

# Where this spec's preset values come from (the presets take them from here, solrl_core/config/presets.py;
# configs/parts/models/wan.yaml holds the rest):
#   model.resolution = 256: Flow-Factory's rollouts (its evaluation: 480)
#   model.frames = 5: Flow-Factory's rollouts (its evaluation: 13)
#   model.max_sequence_length = 512: WanPipeline's default, Flow-Factory's and UniRL's
#   quant.skip_names = [condition_embedder, proj_out]: chosen here: the time and text embedders and the output
#     projection
#   quant.min_width = 1536: chosen here: the hidden width, as SD3.5-L's 2432 (attention kept, feed-forward in 4 bits)
#   train.lora_targets = null: the backbone's default: Flow-Factory's (attention and feed-forward)
#   train.lora_rank = 64: Flow-Factory
#   train.lora_alpha = 128: Flow-Factory
#   train.timestep_fraction = 0.6: chosen here (SD3.5's and SANA's)
#   train.micro_batch = 8: chosen here
#   train.optimizer.grad_clip = 1.0: Flow-Factory's max grad norm
DEFAULTS = BackboneDefaults(
    lora_targets=["attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0",
                  "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0", "ffn.net.0.proj", "ffn.net.2"],
    quant_skip_names=["condition_embedder", "proj_out"],
    quant_min_width=WIDTH,
    sampler="euler",
    resolution=256,
    max_sequence_length=512,  # UMT5 tokens: WanPipeline's __call__ default, Flow-Factory's and UniRL's
    grad_clip=1.0,
    frames=5,
)

SPEC = BackboneSpec(
    key="wan",
    title="Wan2.1-T2V-1.3B",
    kind="wan",
    adapter="solrl_core.models.backbones.wan:WanBackbone",
    order=60,
    defaults=DEFAULTS,
    config_file="wan2.1-t2v-1.3b.transformer.json",
    tokens=TOKENS,
    image_tokens=512,  # 256 px, VAE f8 -> 32x32, 1x2x2 patches -> 256 tokens per latent frame, 2 latent frames
    text_tokens=DEFAULTS.max_sequence_length,
    coverage=(CoverageRow("wan2.1-t2v-1.3b", "Wan2.1-T2V-1.3B", "no official setting: min width = its hidden width "
                          "1536 (solrl_core/models/backbones/specs/wan.py)", planner_key="wan",
                          planner_note="no official Sol-RL setting: Flow-Factory's Wan 2.1 GRPO rollouts (256 px, 5 "
                          "frames), the quantization rule chosen here"),),
    timestep_fraction=0.6,
    vae="wan-f8c16",
    latent_shape=(16, 2, 32, 32),  # 5 frames at 256 px: 1 + (5 - 1) / 4 latent frames of 32 x 32
    aliases=("wan2.1-t2v-1.3b", "wan-1.3b", "wan2.1"),
    text_encoders={"UMT5-XXL encoder": "UMT5_XXL"},
    lora_rank=64,
    lora_alpha=128,
    micro_batch=8,
    settings=("Flow-Factory's published Wan 2.1 GRPO settings and choices made here, as "
              "solrl_core/models/backbones/specs/wan.py says (there is no official Sol-RL setting for a video model)"),
    tiny_maker="solrl_core.models.backbones.tiny.wan:make_tiny_wan",
    temporal_compression=4,
    causal_decoder=True,  # AutoencoderKLWan decodes latent frame by frame through causal 3-D convolutions
)
