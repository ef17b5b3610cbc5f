"""FLUX.1-dev: official Sol-RL settings (docs/method.md), the reference NVlabs/Sana's run values."""

from solrl_core.models.backbones.spec import BackboneDefaults, BackboneSpec, CoverageRow, TokenLayout

# Where this spec's preset values come from (the presets take them from here, solrl_core/config/presets.py;
# configs/parts/models/flux1.yaml holds the rest):
#   model.sampler = dpmpp_2m: DPM-Solver++(2M)-style multistep on x0-prediction
#   model.max_sequence_length = 128: T5 tokens (NVlabs/Sana train_scripts/sol_rl/train_flux1.py)
#   quant (the NVFP4 explore copy's rule): NVFP4 explore copy: these stay in high precision
#   quant.min_width = 1000: and every Linear with max(in, out) <= 1000
#   train.lora_targets = null: the backbone's default = the official to_q, to_k, to_v, to_out.0
#   train.timestep_fraction = 0.4: 40% of the 10 steps' times per sample
#   train.micro_batch = 12: per GPU (8 GPUs)
#   train.optimizer.grad_clip = 1.0: NVlabs/Sana configs/sol_rl/flux1.py
DEFAULTS = BackboneDefaults(
    lora_targets=["to_q", "to_k", "to_v", "to_out.0"],
    quant_skip_names=["x_embedder", "context_embedder", "time_text_embed", "norm_out"],
    quant_min_width=1000,
    sampler="dpmpp_2m",
    resolution=512,
    distilled_guidance=True,
    # the reference (NVlabs/Sana): TEXT_ENCODER_MAX_SEQ_LEN in train_scripts/sol_rl/train_flux1.py,
    # train.max_grad_norm in configs/sol_rl/flux1.py (docs/method.md)
    max_sequence_length=128,
    grad_clip=1.0,
)

SPEC = BackboneSpec(
    key="flux1",
    title="FLUX.1-dev",
    kind="flux1",
    adapter="solrl_core.models.backbones.flux:FluxBackbone",
    order=10,
    defaults=DEFAULTS,
    config_file="flux1-dev.transformer.json",
    tokens=TokenLayout(joint=("single_transformer_blocks",)),  # single-stream blocks: image + text
    image_tokens=1024,  # 512 px, VAE f8 -> 64x64x16 latent, packed 2x2 -> 1024 tokens of 64 channels
    text_tokens=DEFAULTS.max_sequence_length,  # T5 tokens
    coverage=(CoverageRow("flux1-dev", "FLUX.1-dev", "official", planner_key="flux1"),),
    timestep_fraction=0.4,
    vae="kl-f8c16",
    latent_shape=(16, 64, 64),
    aliases=("flux", "flux1-dev", "flux.1-dev"),
    text_encoders={"CLIP ViT-L/14 text": "CLIP_L_TEXT", "T5-XXL encoder": "T5_XXL"},
    micro_batch=12,
    tiny_maker="solrl_core.models.backbones.tiny.flux:make_tiny_flux",
)
