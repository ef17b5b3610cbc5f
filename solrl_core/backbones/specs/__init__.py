"""One module per backbone model, each defining `SPEC` (a solrl_core.backbones.spec.BackboneSpec); listed by
solrl_core.backbones.registry.backbone_specs. A module here imports no torch and no adapter."""
