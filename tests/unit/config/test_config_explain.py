"""Every config key is explained: descriptions on the schema, `solrl config --explain`, docs/config.md."""

from __future__ import annotations

from typing import get_args

import pytest
import yaml
from pydantic import BaseModel

from solrl.cli.main import main
from solrl_core.config.schema import RunConfig
from solrl_core.config.loading import load_config
from solrl_core.config.explain import explain, field_rows, markdown, sections
from solrl_core.config.explain import main as explain_main
from solrl_core.errors import ConfigError
from repo_paths import ROOT

DOC = ROOT / "docs" / "config.md"


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _undescribed(model: type[BaseModel], prefix: str = "") -> list[str]:
    missing = []
    for name, field in model.model_fields.items():
        if not (field.description or "").strip():
            missing.append(prefix + name)
        for inner in _models_in(field.annotation):  # sections, also inside Optional / list / dict
            missing += _undescribed(inner, f"{prefix}{name}.")
    return missing


def test_every_config_field_has_a_description():
    assert _undescribed(RunConfig) == []


def test_the_check_finds_a_field_without_a_description():
    class Inner(BaseModel):
        bare: int = 1

    class Outer(BaseModel):
        inner: Inner | None = None

    assert _undescribed(Outer) == ["inner", "inner.bare"]


def test_sections_are_every_nested_model():
    names = list(sections())
    assert names[0] == "" and {"model", "explore", "explore.guardrail", "train", "train.optimizer"} <= set(names)
    assert sections()["train.optimizer"] is type(RunConfig().train.optimizer)


def test_explain_a_section_lists_its_fields_with_type_default_and_description():
    text = explain("train.optimizer", width=100)
    assert text.splitlines()[0] == "train.optimizer: AdamW settings of the update"
    for name, field in RunConfig().train.optimizer.model_fields.items():
        assert f"train.optimizer.{name}: " in text
    assert "train.optimizer.lr: float = 0.0003" in text
    assert "train.optimizer.grad_clip: float | null = null" in text
    assert "train.optimizer.betas: tuple[float, float] = [0.9, 0.999]" in text
    assert all(len(line) <= 100 for line in text.splitlines())
    rows = {r["key"]: r for r in field_rows("select")}
    from solrl_core.rl.selection import SELECTION_MODES

    assert rows["select.mode"]["type"] == "str"  # a registered rule or a plug-in; the description names each rule
    assert all(mode in rows["select.mode"]["description"] for mode in SELECTION_MODES)
    assert "official" in rows["select.k"]["description"]
    # a nested section points at its own explanation
    assert "explore.guardrail: section (solrl config --explain explore.guardrail)" in explain("explore")


def test_explain_everything_covers_every_section():
    text = explain(width=100)
    for name in sections():
        for row in field_rows(name):
            assert f"{row['key']}: " in text


def test_unknown_section_names_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown config section 'trian'; sections: model, .*train\.optimizer"):
        field_rows("trian")


def test_solrl_config_explain_and_its_error(capsys):
    assert main(["config", "--explain", "train.optimizer"]) == 0
    assert capsys.readouterr().out == explain("train.optimizer")
    assert main(["config", "--explain", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown config section 'nope'" in err and "train.optimizer" in err


def test_solrl_config_show_prints_the_resolved_config(capsys):
    assert main(["config", "--show", str(ROOT / "configs" / "demo.yaml"), "--set", "select.k=4"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown == load_config(ROOT / "configs" / "demo.yaml", ["select.k=4"]).model_dump(mode="json")
    assert shown["select"]["k"] == 4 and shown["train"]["optimizer"]["lr"] == 1e-3  # --set and the file's value


def test_checked_in_reference_equals_the_generator_output():
    assert DOC.read_text(encoding="utf-8") == markdown(), (
        "docs/config.md is out of date: python -m solrl_core.config.explain --write docs/config.md")


def test_reference_has_one_row_per_field():
    text = markdown()
    for name in sections():
        for row in field_rows(name):
            assert f"| `{row['key']}` |" in text


def test_write_and_check(tmp_path, capsys):
    out = tmp_path / "config.md"
    assert explain_main(["--write", str(out)]) == 0 and out.read_text(encoding="utf-8") == markdown()
    assert explain_main(["--check", str(out)]) == 0
    out.write_text(markdown().replace("AdamW learning rate", "learning rate"), encoding="utf-8")
    assert explain_main(["--check", str(out)]) == 1
    assert "out of date" in capsys.readouterr().out
