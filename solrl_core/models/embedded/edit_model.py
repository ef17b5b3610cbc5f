"""The embedded editing model: the embedded image model (solrl_core/models/embedded/model.py) that also sees the source
image, as three more input channels of its SD3 transformer, and reads the instruction alone.

An edit prompt of the editing world is "SOURCE SCENE: INSTRUCTION" (solrl_core/worlds/edits.py `Edit.prompt`); the
scene is for the reward, which must know what the instruction applies to. The model reads the instruction
(`instruction_of`) with its own word-level tokenizer (the instructions' words), and the scene from the source image.

`from_image_model` starts it from the image model's weights: the transformer's patch embedding grows three input
channels initialised at zero (so at first it is the image model, blind to the source), the text encoder keeps every
weight but the token embeddings, whose rows of words the two grammars share are copied. Saved as the image model is,
with "edits": true in its metadata.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from diffusers import SD3Transformer2DModel
from transformers import CLIPTextModel

from solrl_core.models.embedded.model import EmbeddedModel, build_tokenizer, images_to_latents, text_encoder_config
from solrl_core.worlds.edits import PROMPT_SEPARATOR, all_edits

SOURCE = "source"  # the conditioning key of the source image, (B, 3, R, R) in [-1, 1]
EDITS_KEY = "edits"  # the model directory's metadata flag


def instruction_of(prompt: str) -> str:
    """The instruction of an edit prompt ("a red circle: make it blue" -> "make it blue"); a bare instruction as is."""
    scene, sep, instruction = str(prompt).partition(PROMPT_SEPARATOR)
    return instruction if sep else scene


def instruction_tokenizer():
    """The word-level tokenizer of every instruction of the editing world."""
    return build_tokenizer(sorted({edit.instruction for edit in all_edits()}))


def source_latents(images: np.ndarray) -> torch.Tensor:
    """Source images uint8 (B, R, R, 3) as the model's source input (B, 3, R, R) in [-1, 1]."""
    return images_to_latents(images)


def from_image_model(image_model: EmbeddedModel) -> EmbeddedModel:
    """The editing model made from the image model's weights (see the module docstring)."""
    config = dict(image_model.transformer.config)
    config["in_channels"] = 6
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        transformer = SD3Transformer2DModel(**{k: v for k, v in config.items() if not k.startswith("_")})
    state = image_model.transformer.state_dict()
    conv = state["pos_embed.proj.weight"]  # (width, 3, p, p)
    state["pos_embed.proj.weight"] = torch.cat([conv, torch.zeros_like(conv)], dim=1)
    transformer.load_state_dict(state)

    tokenizer = instruction_tokenizer()
    text_encoder = CLIPTextModel(text_encoder_config(tokenizer))
    old = image_model.text_encoder.state_dict()
    key = "embeddings.token_embedding.weight"
    new = {k: v for k, v in old.items() if k != key}
    table = text_encoder.state_dict()[key].clone()
    old_vocab, new_vocab = image_model.tokenizer.get_vocab(), tokenizer.get_vocab()
    for word, row in new_vocab.items():
        if word in old_vocab:
            table[row] = old[key][old_vocab[word]]
    text_encoder.load_state_dict({**new, key: table})
    return EmbeddedModel(transformer.eval(), text_encoder.eval(), tokenizer, image_model.resolution,
                         {**copy.deepcopy(image_model.metadata), EDITS_KEY: True})


def encode_edits(model: EmbeddedModel, prompts, sources: torch.Tensor) -> dict[str, torch.Tensor]:
    """The conditioning of edit prompts (their instructions, with grad) and their sources (B, 3, R, R)."""
    return {**model.encode([instruction_of(p) for p in prompts]), SOURCE: sources}


def predict_edit_velocity(transformer: torch.nn.Module, x_t: torch.Tensor, sigma: torch.Tensor, cond: dict
                          ) -> torch.Tensor:
    """The velocity at sigma of the image x_t given the source `cond["source"]` (a grey image when there is none: the
    quantize stage's calibration prompt): the image model's call with the source as three more channels."""
    from solrl_core.models.embedded.model import predict_velocity

    source = cond.get(SOURCE)
    if source is None:
        source = torch.zeros_like(x_t)
    return predict_velocity(transformer, torch.cat([x_t, source.to(x_t.dtype)], dim=1), sigma, cond)
