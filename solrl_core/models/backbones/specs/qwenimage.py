"""Qwen-Image (diffusers QwenImageTransformer2DModel, Qwen2.5-VL-7B text encoder, AutoencoderKLQwenImage). There is
no official Sol-RL setting for Qwen-Image: the values follow peers' published Qwen-Image configs where they agree
(flow_grpo, Flow-Factory, verl-omni), FLUX.1's official rule where no peer has one (the NVFP4 explore copy) and choices
made here otherwise. Each value of the preset part, configs/parts/models/qwenimage.yaml, names its source there (the
part must say what this spec says: tests/unit/models/backbones/test_backbone_specs.py); the values the part leaves
to this spec (the LoRA targets) name theirs here."""

from solrl_core.models.backbones.spec import (DIT_SAMPLE_LAYERS, DIT_TEXT_LAYERS, BackboneDefaults, BackboneSpec,
                                              CoverageRow)
from solrl_core.models.backbones.spec import TokenLayout

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
                          "(configs/parts/models/qwenimage.yaml)", planner_key="qwenimage",
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
              "configs/parts/models/qwenimage.yaml (there is no official Sol-RL setting for Qwen-Image)"),
    tiny_maker="solrl_core.models.backbones.tiny.qwenimage:make_tiny_qwenimage",
)
