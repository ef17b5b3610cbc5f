"""Stable Diffusion 3.5 Large: official Sol-RL settings (docs/method.md), the reference NVlabs/Sana's run values."""

from solrl_core.models.backbones.spec import BackboneDefaults, BackboneSpec, CoverageRow

CLIP_TOKENS = 77  # CLIP-L/-G tokens that precede the T5 tokens in SD3's joint text sequence (the tokenizers' length)

# Where this spec's preset values come from (the presets take them from here, solrl_core/config/presets.py;
# configs/parts/models/sd35l.yaml holds the rest):
#   model.sampler = dpmpp_2m: as FLUX
#   model.max_sequence_length = 128: T5 tokens (NVlabs/Sana train_scripts/sol_rl/train_sd3.py)
#   quant (the NVFP4 explore copy's rule): NVFP4 explore copy: these stay in high precision
#   quant.min_width = 2432: and every Linear with max(in, out) <= 2432 (the attention projections)
#   train.lora_targets = null: the backbone's default = the official to_q/k/v, to_out.0, add_q/k/v_proj, to_add_out
#   train.micro_batch = 4: per GPU (8 GPUs)
#   train.optimizer.grad_clip = 0.002: NVlabs/Sana configs/sol_rl/sd3.py keeps configs/sol_rl/base.py's value
DEFAULTS = BackboneDefaults(
    lora_targets=["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"],
    quant_skip_names=["pos_embed", "context_embedder", "time_text_embed", "norm_out", "norm1", "ff_context"],
    quant_min_width=2432,
    sampler="dpmpp_2m",
    resolution=1024,
    distilled_guidance=False,
    # the reference (NVlabs/Sana): TEXT_ENCODER_MAX_SEQ_LEN in train_scripts/sol_rl/train_sd3.py; configs/sol_rl/
    # sd3.py leaves configs/sol_rl/base.py's train.max_grad_norm in place (docs/method.md)
    max_sequence_length=128,
    grad_clip=0.002,
)

SPEC = BackboneSpec(
    key="sd35l",
    title="SD3.5-Large",
    kind="sd35",
    adapter="solrl_core.models.backbones.sd3:SD3Backbone",
    order=20,
    defaults=DEFAULTS,
    config_file="sd35-large.transformer.json",
    image_tokens=4096,  # 1024 px, VAE f8 -> 128x128x16 latent, patch 2 -> 4096 tokens
    text_tokens=CLIP_TOKENS + DEFAULTS.max_sequence_length,  # CLIP tokens, then T5
    coverage=(CoverageRow("sd35-large", "SD3.5-Large", "official", planner_key="sd35l"),),
    timestep_fraction=0.6,
    vae="kl-f8c16",
    latent_shape=(16, 128, 128),
    aliases=("sd35-large", "sd3.5-large", "sd35"),
    text_encoders={"CLIP ViT-L/14 text": "CLIP_L_TEXT", "OpenCLIP bigG/14 text": "CLIP_G_TEXT",
                   "T5-XXL encoder": "T5_XXL"},
    micro_batch=4,
    tiny_maker="solrl_core.models.backbones.tiny.sd3:make_tiny_sd35l",
)
