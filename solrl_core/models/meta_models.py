"""The full-size transformers of the backbone specs, built from their diffusers configs on the meta device (no
memory, no weights): one `ModelSpec` per coverage row of a spec, with the quantization rule and token counts of one
sample at the official resolution. The planner counts their FLOPs and memory; the quantization coverage report
(solrl_core/lab/quant_coverage.py) counts their layers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from solrl_core.models.backbones.registry import backbone_specs
from solrl_core.models.backbones.spec import BackboneSpec, CoverageRow, TokenLayout


@dataclass(frozen=True)
class ModelSpec:
    """One coverage row: a config file, the quantization rule applied, and the token counts of one sample at
    the official resolution (image tokens of the latent, text tokens of the prompt encoder)."""

    key: str
    title: str
    config_file: str
    skip_names: tuple[str, ...]
    min_width: int
    kind: str  # the backbone's model.kind (its adapter builds the transformer's example inputs)
    resolution: int
    image_tokens: int
    text_tokens: int
    rule_note: str = ""
    ffn_convs_as_linear: bool = False
    tokens: TokenLayout = TokenLayout()  # which modules see which tokens

    @classmethod
    def of(cls, backbone: BackboneSpec, row: CoverageRow) -> ModelSpec:
        """The coverage row `row` of a backbone, under its official skip names and min width."""
        d = backbone.defaults
        return cls(row.key, row.title, backbone.config_file, tuple(d.quant_skip_names), d.quant_min_width,
                   backbone.kind, d.resolution, backbone.image_tokens, backbone.text_tokens, row.rule_note,
                   row.ffn_convs_as_linear, backbone.tokens)


MODELS: tuple[ModelSpec, ...] = tuple(ModelSpec.of(b, row) for b in backbone_specs() for row in b.coverage)


def build_meta_model(config_path: str | Path) -> nn.Module:
    """The diffusers transformer of a config.json (its ``_class_name``), built on the meta device."""
    import diffusers

    config_path = Path(config_path)
    if not config_path.is_file():
        raise FileNotFoundError(f"model config not found: {config_path}")
    config = json.loads(config_path.read_text())
    cls = getattr(diffusers, config["_class_name"])
    with torch.device("meta"):
        return cls.from_config(config)


def ffn_convs_as_linear(model: nn.Module) -> nn.Module:
    """Replace the 1×1, ungrouped Conv2d layers inside ``.ff`` modules by meta nn.Linear of the same in/out."""
    for name, module in list(model.named_modules()):
        if not isinstance(module, nn.Conv2d) or ".ff." not in f".{name}.":
            continue
        if module.kernel_size != (1, 1) or module.groups != 1:
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        with torch.device("meta"):
            setattr(parent, child, nn.Linear(module.in_channels, module.out_channels, bias=module.bias is not None))
    return model
