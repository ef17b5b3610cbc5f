"""Qwen-Image (diffusers QwenImageTransformer2DModel, Qwen2.5-VL-7B text encoder, AutoencoderKLQwenImage). There is
no official Sol-RL setting for Qwen-Image: the values follow peers' published Qwen-Image configs where they agree
(flow_grpo, Flow-Factory, verl-omni), FLUX.1's official rule where no peer has one (the NVFP4 explore copy) and choices
made here otherwise. Each value names its source: those the presets take from this spec below, the rest in the
preset part, configs/parts/models/qwenimage.yaml."""

from solrl_core.models.backbones.spec import (DIT_SAMPLE_LAYERS, DIT_TEXT_LAYERS, BackboneDefaults, BackboneSpec,
                                              CoverageRow)
from solrl_core.models.backbones.spec import TokenLayout

# Where this spec's preset values come from (the presets take them from here, solrl_core/config/presets.py;
# configs/parts/models/qwenimage.yaml holds the rest):
#   model.resolution = 512: flow_grpo, Flow-Factory and verl-omni all train at 512 px (native: 1328 px)
#   model.sampler = euler: an ODE solver, as Flow-Factory's DiffusionNFT file ("ODE"). Euler is QwenImagePipeline's
#     own scheduler (FlowMatchEulerDiscreteScheduler)
#   model.max_sequence_length = 256: Qwen2.5-VL tokens after the template. verl-omni uses 256 (both scripts);
#     Flow-Factory uses 1024 (encode_prompt's default). 256 is chosen for two reasons. At ~4 characters per token it
#     holds all but ~0.2% of flow_grpo's dataset/pickscore prompts (the rest are cut). Prompts are padded to this
#     length, and every transformer call runs on the padding: 1024 would double the 1024 image tokens, while 256 adds
#     a quarter
#   quant (the NVFP4 explore copy's rule): NVFP4 explore copy: no peer quantizes, so FLUX.1's official rule
#     (docs/method.md) mapped to Qwen-Image's modules of the same role, the closest official MMDiT
#   quant.skip_names = [img_in, txt_in, time_text_embed, norm_out]: FLUX.1's x_embedder, context_embedder,
#     time_text_embed, norm_out
#   quant.min_width = 1000: FLUX.1's; every block Linear (>= 3072 wide) is quantized, as for FLUX.1
#   train.lora_rank = 64: Flow-Factory (both files) and verl-omni (both scripts) agree on rank 64 / alpha 128
#   train.lora_alpha = 128: (the official recipe's 32 / 64 has the same scale alpha / rank = 2). Costs here: 425 M
#     LoRA parameters, 9.5 GiB of update state per GPU, 8.5 GB per iteration's checkpoint
#   train.lora_targets = null: the backbone's default: verl-omni's 12 attention and MLP projections of both streams
#     (solrl_core/models/backbones/specs/qwenimage.py)
#   train.timestep_fraction = 0.4: the peers differ. verl-omni's DiffusionNFT script sets timestep_fraction=1.0 (all
#     10 times). flow_grpo keeps config/base.py's 1.0 but samples with a 2-step SDE window (sde_window_size=2). 0.4 is
#     Sol-RL's official value for FLUX.1, whose 512 px runs have the same 1024 image tokens. 1.0 would make the update
#     2.5 times as expensive
#   train.micro_batch = 8: per GPU (8 GPUs). Not from a peer (theirs count samples, ours (sample, time) pairs): sized
#     for the 20B model (FLUX.1's 12B runs 12); the update then fits an 80 GB GPU (docs/backbones.md)
#   train.optimizer.grad_clip = 1.0: flow_grpo (config/base.py max_grad_norm), Flow-Factory (max_grad_norm) and
#     verl-omni (verl_omni/trainer/config/diffusion/actor/dp_diffusion_actor.yaml grad_clip) all use 1.0
DEFAULTS = BackboneDefaults(
    # verl-omni's 12 target_modules (verl-project/verl-omni examples/diffusionnft_trainer/qwen_image/
    # run_qwen_image_ocr_lora.sh and examples/flowgrpo_trainer/qwen_image/run_qwen_image_ocr_lora.sh): the attention
    # projections of the image and text streams and both Linear layers of each stream's MLP. Flow-Factory's default
    # (X-GenGroup/Flow-Factory src/flow_factory/models/qwen_image/qwen_image.py) names the same 12 projections, but
    # writes the MLPs' second Linear as `img_mlp.net.2.proj` / `txt_mlp.net.2.proj`, which match no module of
    # diffusers' QwenImageTransformer2DModel (its net.2 is the Linear itself), so it adapts 10 of them.
    lora_targets=["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
                  "img_mlp.net.0.proj", "img_mlp.net.2", "txt_mlp.net.0.proj", "txt_mlp.net.2"],
    quant_skip_names=["img_in", "txt_in", "time_text_embed", "norm_out"],
    quant_min_width=1000,
    sampler="euler",
    resolution=512,  # a multiple of Qwen-Image's 16 px (VAE 8 x 2x2 packing)
    distilled_guidance=False,  # QwenImageTransformer2DModel: guidance_embeds False in the release
    max_sequence_length=256,
    grad_clip=1.0,
)

SPEC = BackboneSpec(
    key="qwenimage",
    title="Qwen-Image",
    kind="qwenimage",
    adapter="solrl_core.models.backbones.qwenimage:QwenImageBackbone",
    order=50,
    defaults=DEFAULTS,
    config_file="qwen-image.transformer.json",
    # per-sample AdaLN modulation (img_mod, txt_mod) and the text stream (txt_in, txt_mlp) by Qwen-Image's names
    tokens=TokenLayout(sample=(*DIT_SAMPLE_LAYERS, "img_mod", "txt_mod"), text=(*DIT_TEXT_LAYERS, "txt_in", "txt_mlp")),
    image_tokens=(DEFAULTS.resolution // 16) ** 2,  # VAE f8, packed 2x2: 512 px -> 1024 tokens of 64 channels
    text_tokens=DEFAULTS.max_sequence_length,
    coverage=(CoverageRow("qwen-image", "Qwen-Image", "no official setting: FLUX.1's rule in Qwen-Image's names "
                          "(solrl_core/models/backbones/specs/qwenimage.py)", planner_key="qwenimage",
                          planner_note="no official Sol-RL setting: peers' resolution and LoRA, FLUX.1's quantization "
                          "rule and timestep fraction"),),
    timestep_fraction=0.4,
    vae="qwen-f8c16",
    latent_shape=(16, 1, 64, 64),  # one frame of the causal video VAE at 512 px
    aliases=("qwen-image", "qwen"),
    text_encoders={"Qwen2.5-VL-7B": "QWEN25_VL_7B"},
    micro_batch=8,
    lora_rank=64,
    lora_alpha=128.0,
    settings=("settings from peers' published Qwen-Image configs and choices made here, each value with its source in "
              "solrl_core/models/backbones/specs/qwenimage.py and configs/parts/models/qwenimage.yaml (there is no "
              "official Sol-RL setting for Qwen-Image)"),
    tiny_maker="solrl_core.models.backbones.tiny.qwenimage:make_tiny_qwenimage",
)
