"""Old names keep working with a one-line notice (solrl_core/renamed.py): the family once called diffusionnft, the
presets and the family config named after it."""

from __future__ import annotations

import warnings

import pytest

from repo_paths import ROOT
from solrl.cli.main import main
from solrl_core.config.loading import load_config
from solrl_core.config.presets import preset_at, preset_path
from solrl_core.config.sources import packaged_config
from solrl_core.renamed import FAMILIES, RenamedNotice


def test_an_old_family_name_is_read_as_the_new_one_with_a_notice():
    base = ROOT / "configs" / "families" / "baseline.yaml"
    with pytest.warns(RenamedNotice, match="family diffusionnft is now called baseline; write family: baseline"):
        old = load_config(base, ["family=diffusionnft"])
    assert old.family == "baseline" and old == load_config(base)
    assert set(FAMILIES.values()) <= {"baseline"}  # every new name is a family the schema knows


@pytest.mark.parametrize("old, new", [
    ("flux1_diffusionnft_pickscore", "flux1_baseline_pickscore"),
    ("awm/sd35m_diffusionnft_clipscore", "awm/sd35m_baseline_clipscore"),
])
def test_an_old_preset_name_resolves_to_its_new_name(old, new):
    with pytest.warns(RenamedNotice, match=f"{old} is now called {new}"):
        assert packaged_config(old) == preset_path(new)
    with pytest.warns(RenamedNotice):
        assert preset_at(preset_path(old)).name == new  # the path the docs wrote, configs/presets/<old>.yaml
    with pytest.warns(RenamedNotice):
        assert load_config(packaged_config(old)) == load_config(preset_path(new))


def test_unknown_names_are_not_guessed():
    assert packaged_config("flux1_diffusionnft_nosuchreward") is None
    assert packaged_config("families/nosuchfamily") is None


def test_the_command_line_says_it_in_one_note_line(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        assert main(["config", "--show", "families/diffusionnft"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == ["solrl: note: families/diffusionnft is now called families/baseline"]
    assert "family: baseline" in out
