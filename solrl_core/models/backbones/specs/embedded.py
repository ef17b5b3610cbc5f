"""The embedded pixel-space model shipped with solrl (solrl_core.models.embedded): the default `model.kind`. It has no
full-size model, so no coverage row, planner shapes, tiny maker or preset part."""

from solrl_core.models.backbones.spec import BackboneDefaults, BackboneSpec
from solrl_core.models.backbones.specs.sd35l import DEFAULTS as SD35

WIDTH = 128  # the embedded transformer's hidden width (solrl_core.models.embedded.model.WIDTH; a test checks they agree)

SPEC = BackboneSpec(
    key="embedded",
    title="embedded",
    kind="embedded",
    adapter="solrl_core.models.backbones.embedded:EmbeddedBackbone",
    order=0,
    defaults=BackboneDefaults(
        # SD3.5's official LoRA targets: the joint attention's image and context projections
        lora_targets=SD35.lora_targets,
        # SD3.5's official high-precision list (pos_embed is a Conv2d here, so it only matters to a Conv-aware
        # quantizer)
        quant_skip_names=SD35.quant_skip_names,
        # SD3.5-L's rule scaled to this model: its official floor (2432) is its hidden width, so the attention
        # projections stay in high precision and the feed-forward goes to 4 bits; here the hidden width is 128
        # (WIDTH). At 32 (attention in 4 bits too, 93% of the Linear FLOPs) the explore ranked seeds far worse:
        # within-prompt Spearman 0.68 vs 0.79 at 128 (the fidelity sweep in docs/lab/fidelity-sweep.md)
        quant_min_width=WIDTH,
    ),
    shipped=True,
    fixed_resolution=True,  # defaults.resolution = 32: the shipped weights' (pretrained/solrl_embedded.json)
)
