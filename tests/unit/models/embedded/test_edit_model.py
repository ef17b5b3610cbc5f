"""The embedded editing model: made from the image model (blind to the source at first, the shared words' embeddings
kept), loaded by its adapter (model.kind embedded_edit), which reads an edit prompt's instruction and its source."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from solrl_core.config.schema import ModelConfig
from solrl_core.errors import SolrlError
from solrl_core.models.backbones.embedded import PRETRAINED_DIR
from solrl_core.models.backbones.registry import load_backbone
from solrl_core.models.embedded import edit_model
from solrl_core.models.embedded.model import load_model, predict_velocity

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def image_model():
    return load_model(PRETRAINED_DIR)


@pytest.fixture(scope="module")
def saved(image_model, tmp_path_factory):
    return edit_model.from_image_model(image_model).save(tmp_path_factory.mktemp("edit") / "model")


def test_made_from_the_image_model_it_starts_as_the_image_model_blind_to_the_source(image_model):
    model = edit_model.from_image_model(image_model)
    x, sigma = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)), torch.tensor([0.6])
    cond = image_model.encode(["a red circle", "two blue squares"])
    with torch.no_grad():
        before = predict_velocity(image_model.transformer, x, sigma, cond)
        for source in (torch.zeros_like(x), torch.rand_like(x) * 2 - 1):
            after = edit_model.predict_edit_velocity(model.transformer, x, sigma, {**cond, edit_model.SOURCE: source})
            torch.testing.assert_close(after, before, atol=1e-6, rtol=1e-5)
    old, new = image_model.tokenizer.get_vocab(), model.tokenizer.get_vocab()
    table, old_table = (m.text_encoder.get_input_embeddings().weight for m in (model, image_model))
    assert {"make", "turn", "into", "move", "them"} <= set(new) - set(old)
    for word in ("red", "circle", "left", "two"):
        assert torch.equal(table[new[word]], old_table[old[word]])
    assert model.metadata[edit_model.EDITS_KEY] is True


def test_the_adapter_reads_the_instruction_and_the_source(saved):
    backbone = load_backbone(ModelConfig(kind="embedded_edit", path=str(saved)))
    assert (backbone.edits, backbone.max_sources) == (True, 1)
    rng = np.random.default_rng(0)
    sources = [rng.integers(0, 256, (48, 48, 3), dtype=np.uint8) for _ in range(2)]
    prompts = ["a red circle: make it blue", "two blue squares on the left: turn them into circles"]
    cond = backbone.encode_prompts(prompts, [[Image.fromarray(s)] for s in sources])
    bare = backbone.encode_prompts(["make it blue", "turn them into circles"])
    torch.testing.assert_close(cond["encoder_hidden_states"], bare["encoder_hidden_states"], atol=0, rtol=0)
    expected = [np.asarray(Image.fromarray(s).resize((32, 32), Image.LANCZOS)) for s in sources]
    torch.testing.assert_close(cond[edit_model.SOURCE], edit_model.source_latents(np.stack(expected)))

    transformer = backbone.transformer
    with torch.no_grad():  # a model that uses its source: the velocity follows it
        transformer.pos_embed.proj.weight[:, 3:] = 0.05
        x, sigma = backbone.initial_noise([1, 2]), torch.tensor([0.7])
        with_source = backbone.velocity(transformer, x, sigma, cond)
        other = backbone.velocity(transformer, x, sigma, {**cond, edit_model.SOURCE: -cond[edit_model.SOURCE]})
        grey = backbone.velocity(transformer, x, sigma, bare)  # no source: a grey one (the calibration prompt's)
        zeros = backbone.velocity(transformer, x, sigma, {**bare, edit_model.SOURCE: torch.zeros_like(x)})
    assert not torch.allclose(with_source, other)
    torch.testing.assert_close(grey, zeros, atol=0, rtol=0)


def test_each_kind_refuses_the_others_weights(saved):
    with pytest.raises(SolrlError, match="holds an embedded editing model; set model.kind: embedded_edit"):
        load_backbone(ModelConfig(kind="embedded", path=str(saved)))
    with pytest.raises(SolrlError, match="needs an editing one"):
        load_backbone(ModelConfig(kind="embedded_edit", path=str(PRETRAINED_DIR)))


def test_the_shipped_editing_weights_load_and_were_made_by_the_pretraining_defaults():
    from solrl_core.lab.embedded_pretrain import world

    backbone = load_backbone(ModelConfig(kind="embedded_edit"))  # model.path null: the weights shipped with solrl
    made = backbone.model.metadata["pretraining"]
    edits = world("edits")
    assert (made["world"], made["steps"], made["lr"]) == ("edits", edits.steps, edits.lr)
    assert backbone.edits and backbone.model.metadata[edit_model.EDITS_KEY] is True
