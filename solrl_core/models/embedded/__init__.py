"""The embedded models: the text-to-image model (`model`) of the shapes world and the text-to-video model
(`video_model`) of the moving shapes world (the worlds: solrl_core/worlds/). Their pretraining:
solrl_core/lab/embedded_pretrain.py.

Weights shipped with solrl live in `pretrained/` (images) and `pretrained_video/` (videos);
`solrl_core.models.backbones.embedded.EmbeddedBackbone` and `...embedded_video.EmbeddedVideoBackbone` load them.
"""
