"""Qwen-Image (diffusers QwenImageTransformer2DModel, Qwen2.5-VL-7B text encoder, AutoencoderKLQwenImage). There is
no official Sol-RL setting for Qwen-Image: every value below says where it comes from (mostly FLUX.1's official rule,
the closest official MMDiT, in Qwen-Image's module names)."""

from solrl_core.models.backbones.spec import (DIT_SAMPLE_LAYERS, DIT_TEXT_LAYERS, BackboneDefaults, BackboneSpec,
                                              CoverageRow)
from solrl_core.models.backbones.spec import TokenLayout

DEFAULTS = BackboneDefaults(
    # There is no official Sol-RL setting for Qwen-Image. Each value below says where it comes from.
    # The official FLUX.1 rule (docs/method.md: LoRA on the attention projections q, k, v, out), applied to the
    # same diffusers attention names in Qwen-Image's MMDiT blocks (image stream; not from a reference).
    lora_targets=["to_q", "to_k", "to_v", "to_out.0"],
    # The official FLUX.1 skip names (docs/method.md) mapped onto Qwen-Image's modules of the same role (not from a
    # reference): x_embedder -> img_in, context_embedder -> txt_in, time_text_embed, norm_out.
    quant_skip_names=["img_in", "txt_in", "time_text_embed", "norm_out"],
    # FLUX.1's 1000 (docs/method.md): below the transformer width 3072, so every block Linear is quantized, as
    # for FLUX.1 (not from a reference).
    quant_min_width=1000,
    # Euler ODE on the pipeline's schedule (QwenImagePipeline samples with FlowMatchEulerDiscreteScheduler); not
    # from an RL reference.
    sampler="euler",
    # FLUX.1's official 512 px (docs/method.md), a multiple of Qwen-Image's 16 px (VAE 8 x 2x2 packing); not from
    # a reference (the model's native size is 1328 px, QwenImagePipeline's default_sample_size 128 x 8 = 1024).
    resolution=512,
    distilled_guidance=False,  # QwenImageTransformer2DModel: guidance_embeds False in the release
    # Text tokens after the template: the official FLUX.1 T5 length 128 (not from a reference; the pipeline
    # accepts up to 1024 and keeps the whole prompt).
    max_sequence_length=128,
    grad_clip=1.0,  # the official value of every Sol-RL model (docs/method.md); not from a Qwen-Image reference
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
                          "(backbones/specs/qwenimage.py)", planner_key="qwenimage",
                          planner_note="no official Sol-RL setting: FLUX.1's rule, timestep fraction and resolution"),),
    timestep_fraction=0.4,  # FLUX.1's official value (the closest official MMDiT; not from a reference)
    vae="qwen-f8c16",
    latent_shape=(16, 1, 64, 64),  # one frame of the causal video VAE at 512 px
    aliases=("qwen-image", "qwen"),
    text_encoders={"Qwen2.5-VL-7B": "QWEN25_VL_7B"},
    micro_batch=8,  # not from a reference: 20B parameters vs FLUX.1's 12B at 12
    tiny_maker="solrl_core.models.backbones.tiny.qwenimage:make_tiny_qwenimage",
)
