"""The configs shipped in the package: named by every command that takes a CONFIG, listed by `solrl presets`, written
to an editable file by `solrl presets --write`, and carried as resolved YAML text (what a training deployment holds)."""

from __future__ import annotations

import pytest

from repo_paths import ROOT, TINY
from solrl.cli.main import installed_version, main
from solrl_core.config import presets
from solrl_core.config.schema import dump_config, load_yaml
from solrl_core.config.learning_status import learning_label, read_status
from solrl_core.config.loading import load_config, load_config_from, load_config_text
from solrl_core.errors import ConfigError
from solrl_core.config.packaged import CONFIGS_DIR
from solrl_core.config.sources import packaged_configs, packaged_name, resolve_config


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_every_config_under_configs_has_a_name_except_the_parts_and_every_preset_too():
    assert CONFIGS_DIR == ROOT / "configs"  # in a checkout, the package is the repository's configs/ folder
    known = packaged_configs()
    every = {p for p in CONFIGS_DIR.rglob("*.yaml")
             if not {"parts", "measured"} & set(p.relative_to(CONFIGS_DIR).parts)}  # pieces, and measurements
    assert {path for path in known.values() if path.is_file()} == every
    assert {"demo", "demo_learned", "bench", "pools", "families/sol_rl"} <= set(known)
    assert set(known) - {name for name, path in known.items() if path.is_file()} == set(presets.preset_models())
    assert {"flux1_sol_rl_pickscore", "flow_grpo/flux1_sol_rl_pickscore", "awm/flux1_sol_rl_pickscore"} <= set(known)
    for name, path in known.items():
        assert packaged_name(path) == name
    assert packaged_name(TINY) is None and packaged_name(CONFIGS_DIR / "presets" / "nope.yaml") is None


@pytest.mark.parametrize("argument", ["flux1_sol_rl_pickscore", "flux1_sol_rl_pickscore.yaml",
                                      "presets/flux1_sol_rl_pickscore", "configs/presets/flux1_sol_rl_pickscore.yaml"])
def test_a_preset_is_named_as_the_docs_write_it(argument, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside the checkout: only the package can answer
    assert resolve_config(argument) == CONFIGS_DIR / "presets" / "flux1_sol_rl_pickscore.yaml"


def test_a_file_that_exists_wins_over_a_packaged_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()  # a directory named like a config is no config file: the name still resolves
    assert resolve_config("demo") == CONFIGS_DIR / "demo.yaml"
    mine = tmp_path / "demo.yaml"
    mine.write_text(f"extends: {CONFIGS_DIR / 'demo.yaml'}\niterations: 3\n")
    assert resolve_config("demo.yaml") == mine.relative_to(tmp_path)
    assert load_config("demo.yaml").iterations == 3 and load_config("demo").iterations == 24


def test_an_unknown_name_is_one_line_with_the_closest_names():
    with pytest.raises(ConfigError) as err:
        load_config("flux_sol_rl_pickscor")
    message = str(err.value)
    assert message.startswith("config not found: flux_sol_rl_pickscor is neither a file nor a packaged config")
    assert "flux1_sol_rl_pickscore" in message and "solrl presets" in message and "\n" not in message
    with pytest.raises(ConfigError, match=r"^config not found: zzz .*\(`solrl presets` lists them\)$"):
        resolve_config("zzz")


def test_a_config_as_resolved_text_loads_to_the_same_config():
    cfg = load_config("sana_sol_rl_hpsv2")
    text = dump_config(cfg)
    assert "extends" not in text and load_config_text(text) == cfg
    assert load_config_from(text) == cfg and load_config_from("sana_sol_rl_hpsv2") == cfg
    assert load_config_text(text, ["iterations=7"]).iterations == 7
    with pytest.raises(ConfigError, match="'extends' needs a file"):
        load_config_text("extends: demo.yaml\nname: x\n")
    with pytest.raises(ConfigError, match=r"^config text: the top level must be a mapping"):
        load_config_text("- a\n- b\n")


def test_presets_lists_every_packaged_config_with_model_family_objective_and_reward(capsys):
    assert main(["presets"]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines() if line.strip()}
    status = read_status()  # the learning column: what the learning matrix measured of the objective x family
    label = {cell: learning_label(status.get(cell)) for cell in ("image/diffusionnft/naive_quant",
                                                                 "image/awm/naive_quant", "image/flow_grpo/sol_rl",
                                                                 "image/diffusionnft/sol_rl",
                                                                 "image/diffusionnft/baseline")}
    assert rows["sd35m_naive_quant_imagereward"] == ["sd35m", "naive_quant", "diffusionnft", "imagereward",
                                                     label["image/diffusionnft/naive_quant"]]
    assert rows["awm/sd35m_naive_quant_imagereward"] == ["sd35m", "naive_quant", "awm", "imagereward",
                                                         label["image/awm/naive_quant"]]
    assert rows["flow_grpo/flux1_sol_rl_hpsv2"] == ["flux1", "sol_rl", "flow_grpo", "hpsv2",
                                                    label["image/flow_grpo/sol_rl"]]
    assert rows["demo_learned"] == ["embedded", "sol_rl", "diffusionnft", "embedded_learned",
                                    label["image/diffusionnft/sol_rl"]]
    assert rows["families/baseline"] == ["embedded", "baseline", "diffusionnft", "embedded",
                                         label["image/diffusionnft/baseline"]]
    assert rows["bench"][:2] == ["baseline,", "sol_rl"]
    assert rows["bench_families"][:4] == ["baseline,", "naive_scaling,", "naive_quant,", "sol_rl"]
    assert rows["learning_matrix"][:3] == ["image:", "baseline,", "naive_scaling,"]
    assert set(packaged_configs()) <= set(rows)


def test_write_gives_a_file_that_works_anywhere_and_refuses_to_overwrite(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["presets", "--write", "flux1_sol_rl_pickscore", "mine.yaml", "--set", "iterations=12"]) == 0
    written = tmp_path / "mine.yaml"
    assert "extends" not in load_yaml(written.read_text())
    want = load_config("flux1_sol_rl_pickscore", ["iterations=12"])
    assert load_config(written) == want  # the same config, read from a file that names nothing else
    assert written.read_text().startswith("# FLUX.1-dev, sol_rl, trained on PickScore: official settings")  # what it is
    capsys.readouterr()
    assert main(["presets", "--write", "demo", "mine.yaml"]) == 2
    assert "mine.yaml exists" in one_line_error(capsys) and load_config(written) == want
    assert main(["presets", "--write", "bench", "b.yaml"]) == 2
    assert "bench config" in one_line_error(capsys) and not (tmp_path / "b.yaml").exists()


def test_config_show_takes_a_packaged_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["config", "--show", "pools"]) == 0
    assert load_config_text(capsys.readouterr().out) == load_config(CONFIGS_DIR / "pools.yaml")
    assert main(["config", "--show", "flux_sol_rl_pickscore"]) == 2
    assert "did you mean flux1_sol_rl_pickscore" in one_line_error(capsys)


def test_version_is_the_installed_metadata(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"solrl {version('solrl')}" == f"solrl {installed_version()}"
