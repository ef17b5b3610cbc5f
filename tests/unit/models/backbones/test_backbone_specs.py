"""The backbone specs (solrl_core/models/backbones/specs/) are the one source of the backbones: config validation, the
adapters, the planner, the coverage report, the presets and make-tiny all list the models the specs list, and each
preset part says what its spec says."""

from __future__ import annotations

import pytest

from solrl_core.config import presets
from solrl_core.models.backbones.base import Backbone
from solrl_core.models.backbones.registry import adapter_class, adapters, backbone_spec, backbone_specs
from solrl_core.models.backbones.tiny import tiny_models
from solrl_core.config.loading import load_config, validate_config
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.planner import flops, memory
from solrl_core.lab import quant_coverage as coverage
from solrl_core.rewards import REWARDS

SPECS = backbone_specs()
FULL_SIZE = [s.key for s in SPECS if s.config_file]


def test_every_consumer_lists_the_models_of_the_specs():
    """Every consumer reads the specs: a backbone added later (tests/e2e/test_new_backbone.py) is in every list."""
    assert {"flux1", "sd35l", "sd35m", "sana", "qwenimage", "wan", "wan14b", "wan22"} <= set(FULL_SIZE)
    # every full-size model has presets, the editing models too (on the rewards that score edits)
    assert list(presets.MODELS) == [s.key for s in SPECS if s.part.is_file()] == FULL_SIZE
    assert {"flux1-kontext", "qwenimage-edit"} <= {s.key for s in SPECS if s.edits} & set(presets.MODELS)
    # the 14B's tiny is the 1.3B's (the same architecture): every other full-size model has its own
    assert list(tiny_models()) == [s.key for s in SPECS if s.tiny_maker]
    assert set(tiny_models()) >= set(FULL_SIZE) - {"wan14b"}
    assert list(memory.MODELS) == FULL_SIZE
    assert [m.backbone for m in flops.MODELS.values() if m.key == m.backbone] == FULL_SIZE
    assert {m.backbone for m in flops.MODELS.values()} == set(FULL_SIZE)
    assert [m.key for m in coverage.MODELS] == [row.key for s in SPECS for row in s.coverage]
    assert {m.config_file for m in coverage.MODELS} == {s.config_file for s in SPECS if s.config_file}
    # the titles the tables print are the specs'; the preset rewards are the registered ones with a part
    assert presets.REWARDS == ("pickscore", "clipscore", "hpsv2", "imagereward", "clip_edit")
    assert all(name in REWARDS for name in presets.REWARDS)
    assert {k: presets.TITLES[k] for k in presets.MODELS} == {s.key: s.title for s in SPECS if s.key in presets.MODELS}


def test_planner_names_resolve_through_the_specs():
    for spec in SPECS:
        for alias in spec.aliases:
            if spec.config_file:
                assert flops.get_model(alias).backbone == spec.key
            else:  # a backbone solrl runs but the planner does not price is said so, in one line
                with pytest.raises(SolrlError, match=f"no full-size model of {spec.title} "):
                    flops.get_model(alias)
    with pytest.raises(SolrlError, match=f"known: {', '.join(flops.MODELS)}$"):
        flops.get_model("nope")
    assert {"flux1", "sana", "sana-diffusers", "wan14b"} <= set(flops.MODELS)


def test_config_validation_accepts_exactly_the_kinds_of_the_specs():
    kinds = {s.kind for s in SPECS}
    assert set(adapters()) == kinds >= {"embedded", "embedded_video", "embedded_edit", "flux1", "flux1-kontext",
                                         "sd35", "sana", "qwenimage", "qwenimage-edit", "wan", "wan22"}
    for kind in kinds:
        assert validate_config({"model": {"kind": kind}}).model.kind == kind
    with pytest.raises(ConfigError) as info:
        validate_config({"model": {"kind": "flux2"}})
    assert str(info.value) == (
        f"config: model.kind 'flux2' is not a backbone (known: {', '.join(adapters())}; or package.module:Class)")


def test_each_adapter_is_a_backbone_with_the_defaults_of_its_kind():
    for spec in SPECS:
        cls = adapter_class(spec.kind)
        assert issubclass(cls, Backbone) and cls.name == spec.kind
        assert cls.defaults in [s.defaults for s in SPECS if s.kind == spec.kind]


@pytest.mark.parametrize("key", [s.key for s in SPECS if s.part.is_file()])
def test_the_presets_take_the_specs_values(key):
    """The spec is the one place of these values (the model part sets none of them: tests/unit/config/
    test_presets.py): every preset of the model, whatever its family and objective, carries them."""
    spec = backbone_spec(key)
    first, last = presets.model_rewards(key)[0], presets.model_rewards(key)[-1]
    for name in (f"{key}_sol_rl_{first}", f"{key}_naive_quant_{last}", f"awm/{key}_baseline_{first}"):
        cfg = load_config(name).model_dump(mode="json")
        for dotted, want in spec.part_values().items():
            node = cfg
            for part in dotted.split("."):
                node = node[part]
            assert node == (list(want) if isinstance(want, tuple) else want), (name, dotted)


def test_the_embedded_min_width_is_the_embedded_model_width():
    from solrl_core.models.backbones.specs import embedded
    from solrl_core.models.embedded.model import WIDTH

    assert embedded.WIDTH == WIDTH == backbone_spec("embedded").defaults.quant_min_width
