"""SANA 1600M 1024px (diffusers SanaTransformer2DModel): official Sol-RL settings (docs/method.md), in diffusers'
module names (solrl_core/models/backbones/sana.py maps the native Sana names)."""

from solrl_core.models.backbones.spec import DIT_TEXT_LAYERS, BackboneDefaults, BackboneSpec, CoverageRow, TokenLayout

# The official high-precision list, in native Sana module names, and the diffusers modules holding the same weights
# (t_embedder is time_embed.timestep_embedder in the guidance-embedding variant; logvar_linear is a training-time head
# diffusers does not build; the native fused attn.qkv is split in three).
NATIVE_SKIP = (
    "t_embedder", "t_block", "cfg_embedder", "y_embedder", "x_embedder", "final_layer", "logvar_linear", "attn.qkv",
)
NATIVE_TO_DIFFUSERS: dict[str, tuple[str, ...]] = {
    "t_embedder": ("time_embed.emb.timestep_embedder", "time_embed.timestep_embedder"),
    "t_block": ("time_embed.linear",),
    "cfg_embedder": ("time_embed.guidance_embedder",),
    "y_embedder": ("caption_projection",),
    "x_embedder": ("patch_embed",),
    "final_layer": ("norm_out", "proj_out"),
    "logvar_linear": (),
    "attn.qkv": ("attn1.to_q", "attn1.to_k", "attn1.to_v"),
}

# Where this spec's preset values come from (the presets take them from here, solrl_core/config/presets.py;
# configs/parts/models/sana.yaml holds the rest):
#   model.sampler = euler: Euler ODE, uniform sigmas
#   model.max_sequence_length = 300: Gemma tokens (NVlabs/Sana train_scripts/sol_rl/train_sana.py)
#   train.lora_targets = null: the backbone's default = the official attn.qkv, attn.proj, cross_attn.q_linear,
#     cross_attn.kv_linear, cross_attn.proj in diffusers names
#   train.micro_batch = 16: per GPU (8 GPUs)
#   train.optimizer.grad_clip = 1.0: NVlabs/Sana configs/sol_rl/sana.py
DEFAULTS = BackboneDefaults(
    lora_targets=[
        "attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0",  # attn.qkv, attn.proj
        "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0",  # cross_attn.q_linear, .kv_linear, .proj
    ],
    quant_skip_names=[name for native in NATIVE_SKIP for name in NATIVE_TO_DIFFUSERS[native]],
    quant_min_width=2240,
    sampler="euler",
    resolution=1024,
    # the reference (NVlabs/Sana): TEXT_ENCODER_MAX_SEQ_LEN in train_scripts/sol_rl/train_sana.py (also
    # SanaPipeline's default), train.max_grad_norm in configs/sol_rl/sana.py (docs/method.md)
    max_sequence_length=300,
    grad_clip=1.0,
)

SPEC = BackboneSpec(
    key="sana",
    title="SANA 1600M",
    kind="sana",
    adapter="solrl_core.models.backbones.sana:SanaBackbone",
    order=40,
    defaults=DEFAULTS,
    config_file="sana-1600m-1024px.transformer.json",
    tokens=TokenLayout(text=DIT_TEXT_LAYERS + ("attn2.to_k", "attn2.to_v")),  # cross-attention k/v: the caption
    image_tokens=1024,  # 1024 px, DC-AE f32 -> 32x32x32 latent, patch 1 -> 1024 tokens
    text_tokens=DEFAULTS.max_sequence_length,  # Gemma tokens
    coverage=(
        CoverageRow("sana-1600m", "SANA 1600M", "official, native names mapped onto diffusers",
                    planner_key="sana-diffusers",
                    planner_note="diffusers' standard SANA 1600M: convolutional FFN, no layer in 4 bits"),
        CoverageRow("sana-1600m-linear-ffn", "SANA 1600M, FFN 1×1 convs as Linear",
                    "official; stand-in for the LinearFFN variant", ffn_convs_as_linear=True, planner_key="sana",
                    planner_note="the official LinearFFN variant, approximated by counting the FFN's 1x1 convs as "
                    "Linear"),
    ),
    timestep_fraction=0.6,
    vae="dc-ae-f32c32",
    latent_shape=(32, 32, 32),
    aliases=("sana-1600m", "sana-1600m-linear-ffn", "sana1600m"),
    text_encoders={"Gemma-2-2B": "GEMMA2_2B"},
    micro_batch=16,
    tiny_maker="solrl_core.models.backbones.tiny.sana:make_tiny_sana",
)
