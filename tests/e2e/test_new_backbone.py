"""Adding a backbone touches its spec and its preset part (an adapter and a tiny maker too, where the kind is new),
and nothing else: in a copy of this checkout, a throw-away spec (SD3.5-Medium's adapter and tiny maker under another
name) and its part are added, and the tests that read the backbone registry pass there unchanged, with the new
model's presets, tiny model and planner entry all present (docs/extending.md, "A backbone")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from pathlib import Path

import pytest

from repo_paths import ROOT
from solrl.layout import UNDER_SOLRL

pytestmark = pytest.mark.e2e

SPEC = '''"""A throw-away backbone: SD3.5-Medium's adapter and files under another name, as a newcomer adds one."""

from dataclasses import replace

from solrl_core.models.backbones.spec import CoverageRow
from solrl_core.models.backbones.specs.sd35m import SPEC as MEDIUM

SPEC = replace(
    MEDIUM,
    key="sd35t",
    title="SD3.5-Throwaway",
    order=35,
    coverage=(CoverageRow("sd35-throwaway", "SD3.5-Throwaway", "a test's", planner_key="sd35t",
                          planner_note="a test's"),),
    aliases=("sd35-throwaway",),
    path_marker="throwaway",
    micro_batch=6,
    settings="a throw-away backbone's settings",
)
'''
PART = "# a throw-away backbone (tests/e2e/test_new_backbone.py)\nmodel:\n  path: example/sd35-throwaway\neval:\n  steps: 12\n"
# the tests that read the registries: presets, specs and their consumers, tiny models, the planner's names
REGISTRY_TESTS = ("tests/unit/config/test_presets.py", "tests/unit/config/test_config_ranges.py",
                  "tests/unit/models/backbones/test_backbone_specs.py", "tests/unit/models/backbones/test_make_tiny.py",
                  "tests/unit/config/test_packaged_configs.py")
CHECK = """
from solrl_core.config.loading import load_config
from solrl_core.config.presets import FAMILIES, PRESET_OBJECTIVES, model_rewards, preset_models
from solrl_core.planner.flops import get_model
from solrl_core.models.backbones.tiny import tiny_models
cfg = load_config("sd35t_sol_rl_pickscore")
got = (cfg.model.kind, cfg.train.micro_batch, cfg.eval.steps, cfg.model.path)
assert got == ("sd35", 6, 12, "example/sd35-throwaway"), got
assert load_config("awm/sd35t_naive_quant_hpsv2").objective.name == "awm"
assert model_rewards("sd35t") == model_rewards("sd35m")  # a text-to-image model: the rewards that do not edit
want = len(FAMILIES) * len(model_rewards("sd35t")) * (1 + len(PRESET_OBJECTIVES))  # every family, reward, objective
assert sum(model == "sd35t" for model in preset_models().values()) == want >= 48, want
assert get_model("sd35-throwaway").backbone == "sd35t" and "sd35t" in tiny_models()
print("ok")
"""


def _checkout_copy(dest) -> None:
    """The checkout's files as git knows them (tracked and new, not ignored), copied to `dest`, laid out as the
    install maps them: solrl.flows, solrl.tasks and solrl.configs are the copy's own top folders (links under
    solrl/), so that the copy on PYTHONPATH shadows the installed package whole, its configs/ included."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    for folder in UNDER_SOLRL:
        (dest / "solrl" / folder).symlink_to(Path("..") / folder, target_is_directory=True)


def test_a_new_backbone_is_its_spec_and_its_part(tmp_path):
    copy = tmp_path / "solrl"
    _checkout_copy(copy)
    (copy / "solrl_core" / "models" / "backbones" / "specs" / "sd35t.py").write_text(SPEC)
    (copy / "configs" / "parts" / "models" / "sd35t.yaml").write_text(PART)
    env = {**os.environ, "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}  # the copy shadows the installed package
    check = subprocess.run([sys.executable, "-c", CHECK], cwd=copy, env=env, capture_output=True, text=True,
                           timeout=300)
    assert check.returncode == 0 and check.stdout.strip() == "ok", check.stderr[-3000:]
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                            *REGISTRY_TESTS], cwd=copy, env=env, capture_output=True, text=True, timeout=800)
    assert tests.returncode == 0, tests.stdout[-4000:]
    assert " passed" in tests.stdout and "skipped" not in tests.stdout, tests.stdout[-2000:]
