"""A plug-in (`model.kind`, a reward or `select.mode` as package.module:Class) fails like a user's mistake: a module
that cannot import, raises or exits at import, or a class whose constructor or load raises, is one line naming the
plug-in and the cause; a SolrlError of its own keeps its message; a plug-in never ends a command with success. The
plug-in modules are written into tmp_path and put on sys.path."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from repo_paths import TINY
from solrl_core.models.backbones.registry import check_backbone_files, load_backbone
from solrl_core.config.schema import ModelConfig
from solrl_core.config.loading import load_config, validate_config
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.plugins import describe, plugin_code
from solrl_core.rewards import preflight_rewards, score_images
from solrl_core.rewards.registry import clear_reward_cache, get_reward

AT_IMPORT = {
    "raises": 'raise RuntimeError("no licence server\\nsecond line")',
    "exits0": "raise SystemExit(0)",
    "exits": "import sys\nsys.exit()",
    "zero": "1 / 0",
    "syntax": "def broken(:\n    pass",
    "needs": "import solrl_no_such_dependency",
}

CLASSES = '''
import dataclasses

from solrl_core.models.backbones.embedded import EmbeddedBackbone
from solrl_core.errors import SolrlError
from solrl_core.rewards.base import Reward
from solrl_core.rl.selection import BestWorst


class FailingInit(Reward):
    name = "failing_init"

    def __init__(self, *args, **kwargs):
        raise ValueError("cannot open weights.bin")


class FailingLoad(Reward):
    name = "failing_load"

    @classmethod
    def load(cls, spec=None):
        raise SystemExit(0)


class OwnError(Reward):
    name = "own_error"

    @classmethod
    def load(cls, spec=None):
        raise SolrlError("own_error: set reward_models.own_error.path")


class FailingResolve(Reward):
    name = "failing_resolve"
    needs_weights = True

    @classmethod
    def resolve(cls, spec):
        raise KeyError("HOME")


class FailingBackbone(EmbeddedBackbone):
    @classmethod
    def load(cls, model):
        raise RuntimeError("CUDA driver too old")

    @classmethod
    def check_files(cls, model):
        raise OSError("transformer/ unreadable")


class Bigger(EmbeddedBackbone):
    """The embedded model, loaded as a plug-in: it generates at its weights' 32 px whatever model.resolution says."""


class MyRule(BestWorst):
    name = "my_rule"


class FailingScores(Reward):
    name = "failing_scores"

    def scores(self, images, prompts):
        raise IndexError("list index out of range")


class FailingPick(BestWorst):
    @staticmethod
    def pick( ranked, members, k, generator):
        raise RuntimeError("bad rule")


class WrongCount(BestWorst):
    @staticmethod
    def pick( ranked, members, k, generator):
        return [ranked[:1]]
'''


@pytest.fixture
def package(tmp_path, monkeypatch, request):
    name = f"failing_{request.node.name.split('[')[0][5:30]}"
    root = tmp_path / "plugins" / name
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "classes.py").write_text(textwrap.dedent(CLASSES))
    for module, body in AT_IMPORT.items():
        (root / f"{module}.py").write_text(body + "\n\nclass Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]
    clear_reward_cache()


CAUSES = {
    "raises": "importing module '{m}' raised RuntimeError: no licence server",
    "exits0": "importing module '{m}' called sys.exit(0)",
    "exits": "importing module '{m}' called sys.exit(None)",
    "zero": "importing module '{m}' raised ZeroDivisionError: division by zero",
    "syntax": "importing module '{m}' raised SyntaxError: ",
    "needs": "cannot import module '{m}' (No module named 'solrl_no_such_dependency')",
}


@pytest.mark.parametrize("module", list(AT_IMPORT))
@pytest.mark.parametrize("key, what", [("model.kind", "model.kind"), ("select.mode", "select.mode"),
                                       ("reward_models", "reward_models: reward")])
def test_a_module_that_fails_at_import_is_one_config_error_line(package, module, key, what):
    name = f"{package}.{module}:Thing"
    data = {"reward_models": {name: {}}} if key == "reward_models" else {key.split(".")[0]: {key.split(".")[1]: name}}
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    message = str(info.value)
    assert message.startswith(f"config: {what} '{name}': " + CAUSES[module].format(m=f"{package}.{module}"))
    assert "\n" not in message and "second line" not in message


def test_a_reward_plug_in_that_fails_at_import_is_refused_where_rewards_are_checked(package):
    name = f"{package}.exits0:Thing"
    with pytest.raises(ConfigError, match=rf"^reward '{name}': importing module .* called sys.exit\(0\)$"):
        preflight_rewards({name: 1.0})


@pytest.mark.parametrize("cls, cause", [
    ("FailingInit", "load raised ValueError: cannot open weights.bin"),
    ("FailingLoad", r"load called sys.exit\(0\)"),
])
def test_a_reward_whose_load_or_constructor_raises_is_one_line_naming_it(package, cls, cause):
    name = f"{package}.classes:{cls}"
    images = np.zeros((1, 8, 8, 3), np.uint8)
    with pytest.raises(SolrlError, match=rf"^reward '{name}': {cause}$") as info:
        score_images(images, ["a"], {name: 1.0})
    assert info.value.__cause__ is not None  # the plug-in's own exception, kept for a debugger
    with pytest.raises(SolrlError, match=rf"^reward '{name}': {cause}$"):
        get_reward(name)


def test_a_plug_ins_own_solrl_error_keeps_its_message(package):
    with pytest.raises(SolrlError) as info:
        get_reward(f"{package}.classes:OwnError")
    assert str(info.value) == "own_error: set reward_models.own_error.path"


def test_a_reward_whose_resolve_raises_fails_the_preflight_in_one_line(package):
    name = f"{package}.classes:FailingResolve"
    with pytest.raises(SolrlError, match=rf"^reward '{name}': resolve raised KeyError: 'HOME'$"):
        preflight_rewards({name: 1.0})


def test_a_backbone_whose_load_or_file_check_raises_is_one_line_naming_it(package):
    kind = f"{package}.classes:FailingBackbone"
    model = validate_config({"model": {"kind": kind}}).model
    with pytest.raises(SolrlError, match=rf"^model.kind '{kind}': load raised RuntimeError: CUDA driver too old$"):
        load_backbone(model)
    with pytest.raises(SolrlError, match=rf"^model.kind '{kind}': check_files raised OSError: transformer/ unreadable"):
        check_backbone_files(model)


def test_a_backbone_plug_in_that_ignores_model_resolution_is_refused_at_load(package, one_torch_thread):
    kind = f"{package}.classes:Bigger"
    assert load_backbone(ModelConfig(kind=kind, resolution=32)).resolution == 32
    with pytest.raises(SolrlError, match=r"model.resolution 64: .* generates 32 px images only"):
        load_backbone(ModelConfig(kind=kind, resolution=64))


def test_registered_code_keeps_its_traceback():
    with pytest.raises(ZeroDivisionError):  # solrl's own code: a bug, not the user's
        with plugin_code("embedded", "reward", "load"):
            1 / 0
    with pytest.raises(KeyboardInterrupt):  # the user's Ctrl-C is never turned into an error line
        with plugin_code("pkg.mod:Cls", "reward", "load"):
            raise KeyboardInterrupt


def test_describe_quotes_one_short_line():
    assert describe(ValueError("x" * 500 + "\nmore")) == "ValueError: " + "x" * 200 + "..."
    assert describe(RuntimeError()) == "RuntimeError" and describe(SystemExit(3)) == "sys.exit(3)"


def test_the_cli_ends_in_one_line_and_exit_2_when_a_plug_in_exits_0_at_import(package, capsys, tmp_path):
    from solrl.cli.main import main

    run_dir = tmp_path / "run"
    for key in ("model.kind", "select.mode"):
        capsys.readouterr()
        assert main(["train", str(TINY), "--run-dir", str(run_dir), "--set", f"{key}={package}.exits0:Thing"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"solrl: error: {TINY}: {key} '{package}.exits0:Thing': importing module "
                       f"'{package}.exits0' called sys.exit(0)"]
        assert not run_dir.exists()


def test_a_config_of_a_working_plug_in_still_loads(package):
    cfg = load_config(TINY, [f"select.mode={package}.classes:MyRule"])
    assert cfg.select.mode.endswith(":MyRule")


def test_a_reward_plug_in_that_raises_while_scoring_is_one_line_naming_it(package):
    name = f"{package}.classes:FailingScores"
    with pytest.raises(SolrlError, match=rf"^reward '{name}': scoring raised IndexError: list index out of range$"):
        score_images(np.zeros((2, 8, 8, 3), np.uint8), ["a", "b"], {name: 1.0})


def test_a_selection_plug_in_that_raises_or_picks_wrongly_is_one_line_naming_it(package):
    from solrl_core.rl.selection import select_candidates

    rewards, prompt_index = np.arange(8, dtype=np.float64), np.repeat([0, 1], 4)
    with pytest.raises(SolrlError, match=rf"^select.mode '{package}.classes:FailingPick': picking raised RuntimeError"):
        select_candidates(rewards, prompt_index, 2, f"{package}.classes:FailingPick")
    with pytest.raises(SolrlError, match="picked 1 candidates of prompt 0, not 2"):
        select_candidates(rewards, prompt_index, 2, f"{package}.classes:WrongCount")
