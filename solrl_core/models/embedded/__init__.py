"""The embedded default model: procedural shapes data (`shapes`), the model (`model`) and its pretraining (`pretrain`).

Weights shipped with solrl live in `pretrained/`; `solrl_core.models.backbones.embedded.EmbeddedBackbone` loads them.
"""
