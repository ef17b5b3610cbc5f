"""One module per backbone model, each defining `SPEC` (a solrl_core.models.backbones.spec.BackboneSpec); listed by
solrl_core.models.backbones.registry.backbone_specs. A module here imports no torch and no adapter."""
