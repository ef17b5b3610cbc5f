"""The embedded models: procedural shapes data (`shapes`) and the text-to-image model (`model`); moving shapes
(`motion`) and the text-to-video model (`video_model`). Their pretraining: solrl_core/lab/embedded_pretrain.py.

Weights shipped with solrl live in `pretrained/` (images) and `pretrained_video/` (videos);
`solrl_core.models.backbones.embedded.EmbeddedBackbone` and `...embedded_video.EmbeddedVideoBackbone` load them.
"""
