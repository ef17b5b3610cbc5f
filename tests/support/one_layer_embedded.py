"""The embedded models' classes at one transformer layer, random weights, saved as a model directory: for the
fake-CUDA tier, where nothing is computed (the shipped weights' values are never read) and every layer past the first
only adds ops (each about a millisecond on the fake device)."""

from __future__ import annotations

from pathlib import Path


def one_layer_embedded(kind: str, out: Path) -> str:
    """A model directory of `kind` ("embedded" or "embedded_video"): its tokenizer, text encoder and transformer
    class, one layer deep; `model.path` takes it."""
    from diffusers import SD3Transformer2DModel, WanTransformer3DModel

    from solrl_core.models.embedded import model as image, video_model as video

    if kind == "embedded_video":
        built = video.build_video_model()
        built.transformer = WanTransformer3DModel(**{**video.transformer_config(), "num_layers": 1})
    else:
        built = image.build_model()
        built.transformer = SD3Transformer2DModel(**{**image.transformer_config(), "num_layers": 1})
    return str(built.save(out))
