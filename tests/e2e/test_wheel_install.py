"""The installed wheel works alone: built from this checkout, installed into a new virtual environment outside it
that reuses this environment's dependencies (a `.pth` line naming this site-packages, no editable finder), and run
from an empty directory: --version, presets (listed and written to a file), plan, doctor, and one iteration of the
embedded model trained by its packaged config's name, with every stage's artifact in the run directory. And the one
import name: in an environment that also has a user's own `flows`, `tasks` and `configs` packages (installed, and in
the working directory), both the user's and solrl's import and run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from cli_processes import tracking_set
from solrl.layout import UNDER_SOLRL
from repo_paths import ROOT

pytestmark = pytest.mark.e2e

# What a wheel is built from (a build in the checkout itself would write build/ and *.egg-info there, and a stale
# build/lib would end up in the wheel).
BUILD_FILES = ("pyproject.toml", "setup.py", "README.md")
PACKAGES = ("solrl", "solrl_core", *UNDER_SOLRL)
USERS_OWN = UNDER_SOLRL  # generic names a user's project may have packages of
# The demo at test size (tests/configs/tiny.yaml's sizes), its held-out evaluation kept, small, so that the packaged
# learned scorer is loaded too.
SMALL = ["prompts.per_iteration=2", "explore.seeds_per_prompt=8", "explore.batch_size=8", "explore.steps=3",
         "select.k=4", "regenerate.steps=4", "regenerate.batch_size=4", "train.micro_batch=16", "train.lora_rank=4",
         "train.lora_alpha=8", "tracking.grid_prompts=1", "eval.num_prompts=2", "eval.seeds_per_prompt=1",
         "eval.steps=3"]


def _run(argv: list, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A new virtual environment with the wheel built from this checkout installed (no dependency installed: they
    are this environment's, reached through a .pth file)."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    source.mkdir()
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, source / name)
    for name in PACKAGES:
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
          "--wheel-dir", base / "dist", source])
    (wheel,) = (base / "dist").glob("solrl-*.whl")
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    # a plain path line: this site-packages' own .pth files (the editable install's finder) are not run
    (site / "solrl_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "--quiet", wheel])
    return venv


@pytest.fixture
def solrl_alone(wheel_venv, session_env, tmp_path):
    """Run the installed `solrl` in an empty directory, with nothing of the checkout on the path."""
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in session_env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{wheel_venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return _run([wheel_venv / "bin" / "solrl", *args], cwd=empty, env=env, timeout=timeout)

    run.cwd, run.env = empty, env
    return run


def test_the_wheel_imports_from_its_own_environment_with_its_data(wheel_venv, tmp_path):
    code = ("import json, solrl.configs as configs, solrl.flows as flows, solrl_core, solrl.tasks as tasks; "
            "from importlib.metadata import version; "
            "from solrl_core.config.packaged import CONFIGS_DIR; from solrl_core.models.backbones.embedded import "
            "PRETRAINED_DIR; from solrl_core.models.embedded.scorer_files import shipped_dir; "
            "from solrl_core.models.model_configs import config_dir; "
            "print(json.dumps({'modules': [m.__file__ for m in (configs, flows, solrl_core, tasks)], "
            "'version': version('solrl'), 'data': [str(CONFIGS_DIR), str(PRETRAINED_DIR), str(shipped_dir()), "
            "str(config_dir())]}))")
    found = json.loads(_run([wheel_venv / "bin" / "python", "-c", code], cwd=tmp_path,
                            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}).stdout)
    site = Path(_run([wheel_venv / "bin" / "python", "-c",
                      "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    for path in found["modules"] + found["data"]:
        assert Path(path).is_relative_to(site), path  # nothing read from the checkout
    assert found["version"] == _project_version()
    configs_dir, pretrained, scorer, model_configs = map(Path, found["data"])
    assert {p.relative_to(configs_dir) for p in configs_dir.rglob("*.yaml")} == {
        p.relative_to(ROOT / "configs") for p in (ROOT / "configs").rglob("*.yaml")}
    for shipped, packaged in ((ROOT / "solrl_core/models/embedded/pretrained", pretrained),
                              (ROOT / "solrl_core/models/embedded/scorer", scorer),
                              (ROOT / "solrl_core/models/model_configs", model_configs)):
        assert sorted(p.relative_to(shipped) for p in shipped.rglob("*") if p.is_file() and p.suffix != ".py"
                      and "__pycache__" not in p.parts) == sorted(
            p.relative_to(packaged) for p in packaged.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")
            and "__pycache__" not in p.parts)


def _project_version() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_installed_cli_runs_alone_from_an_empty_directory(solrl_alone, session_env):
    assert solrl_alone("--version").stdout.strip() == f"solrl {_project_version()}"

    listed = solrl_alone("presets").stdout
    names = {line.split()[0] for line in listed.splitlines() if line.strip()}
    assert {"demo", "bench", "pools", "flux1_sol_rl_pickscore", "qwenimage_baseline_hpsv2"} <= names
    solrl_alone("presets", "--write", "demo", "my_demo.yaml", "--set", "iterations=2")
    shown = solrl_alone("config", "--show", "my_demo.yaml").stdout
    assert shown == solrl_alone("config", "--show", "demo", "--set", "iterations=2").stdout

    plan = solrl_alone("plan", "flux1", "--gpu", "h100").stdout
    assert plan.startswith("Cost plan: FLUX.1-dev on 8 x NVIDIA H100") and "| sol_rl |" in plan
    doctor = solrl_alone("doctor").stdout
    assert "CUDA" in doctor and "explore.precision auto" in doctor

    run_dir = solrl_alone.cwd / "run"
    sets = [a for s in SMALL for a in ("--set", s)]
    solrl_alone("train", "demo", "--iterations", "1", "--run-dir", str(run_dir), "--no-progress", *sets,
                *tracking_set(session_env))
    status = json.loads(solrl_alone("status", "--run-dir", str(run_dir), "--json").stdout)
    (iteration,) = status["iterations"]
    assert set(iteration["stages"].values()) == {"complete"}
    assert (run_dir / "config.yaml").is_file() and (run_dir / "iter_0000" / "best_worst.png").is_file()
    assert set(iteration["stages"]) <= {p.name for p in (run_dir / "iter_0000").iterdir() if p.is_dir()}


def _users_own_packages(folder: Path, marker: str) -> None:
    for name in USERS_OWN:
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(f"WHOSE = {marker!r}\n")


def test_a_users_own_flows_tasks_and_configs_neither_shadow_solrl_nor_are_shadowed(wheel_venv, solrl_alone):
    """Installed in the environment, and as folders of the directory it runs in (first on sys.path with `python -c`
    and `python -m`): the user's packages are the ones `import flows` finds, solrl's are solrl.flows & co."""
    python = wheel_venv / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    _users_own_packages(site, "installed")
    project = solrl_alone.cwd / "project"
    _users_own_packages(project, "project")
    code = ("import json, configs, flows, tasks, solrl.flows.training, solrl.tasks.stage_task; "
            "from solrl_core.config.packaged import CONFIGS_DIR; "
            "print(json.dumps({'users': [m.WHOSE for m in (configs, flows, tasks)], 'solrl': "
            "[solrl.flows.training.__file__, solrl.tasks.stage_task.__file__, str(CONFIGS_DIR)]}))")
    for cwd, whose in ((solrl_alone.cwd, "installed"), (project, "project")):
        found = json.loads(_run([python, "-c", code], cwd=cwd, env=solrl_alone.env).stdout)
        assert found["users"] == [whose] * 3
        assert all(Path(path).is_relative_to(site / "solrl") for path in found["solrl"]), found["solrl"]
    shown = _run([python, "-m", "solrl", "config", "--show", "demo"], cwd=project, env=solrl_alone.env).stdout
    assert shown == solrl_alone("config", "--show", "demo").stdout and "explore:" in shown
