"""Bad inputs end with one short line on stderr, a non-zero exit and no traceback."""

import pytest

from cli_processes import assert_one_line_error, tracking_set
from repo_paths import ROOT, TINY
from solrl_core.run.rundir import RunDir


def test_help_explains_every_command(run_cli):
    out = run_cli("--help").stdout
    for command in ("train", "stage", "status", "inspect", "pretrain"):
        assert command in out
    assert "--iteration" in run_cli("stage", "--help").stdout


def test_missing_config_file(run_cli, tmp_path):
    assert_one_line_error(run_cli("train", str(tmp_path / "none.yaml"), check=False), "not found")


def test_unknown_key(run_cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"extends: {TINY}\nexplore: {{stepz: 2}}\n")
    assert_one_line_error(run_cli("train", str(bad), "--run-dir", str(tmp_path / "r"), check=False), "explore.stepz")


def test_wrong_type_via_set(run_cli, tmp_path):
    proc = run_cli("train", str(TINY), "--run-dir", str(tmp_path / "r"), "--set", "select.k=two", check=False)
    assert_one_line_error(proc, "select.k")


def test_missing_weights_file(run_cli, tmp_path):
    empty = tmp_path / "weights"
    empty.mkdir()
    proc = run_cli("train", str(TINY), "--run-dir", str(tmp_path / "r"), "--set", f"model.path={empty}", check=False)
    assert_one_line_error(proc, str(empty))


def test_empty_prompt_list(run_cli, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n\n")
    proc = run_cli("train", str(TINY), "--run-dir", str(tmp_path / "r"), "--set", f"prompts.train={prompts}",
                   check=False)
    assert_one_line_error(proc, "empty")


def test_run_dir_held_by_another_run(run_cli, tmp_path, session_env):
    run_dir = tmp_path / "held"
    with RunDir(run_dir).hold():
        proc = run_cli("train", str(TINY), "--run-dir", str(run_dir), *tracking_set(session_env), check=False)
    assert_one_line_error(proc, "is held by")


def test_stage_without_inputs_names_the_stage_to_run_first(run_cli, tmp_path):
    from solrl_core.config.loading import load_config
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_config import prepare_run

    run_dir = tmp_path / "r"
    prepare_run(RunDir(run_dir), load_config(ROOT / "configs" / "demo.yaml"))  # frozen as `solrl train` does
    proc = run_cli("stage", "select", "--run-dir", str(run_dir), "--iteration", "0", check=False)
    assert_one_line_error(proc, "'score_explore'", "solrl stage score_explore")
    proc = run_cli("stage", "quantize", "--run-dir", str(run_dir), "--iteration", "1", check=False)
    assert_one_line_error(proc, "'update' of iteration 0")


@pytest.mark.parametrize("args", [["status", "--run-dir", "/nonexistent/run"],
                                  ["stage", "bogus", "--run-dir", "/tmp", "--iteration", "0"]])
def test_not_a_run_dir_or_unknown_stage(run_cli, args):
    assert_one_line_error(run_cli(*args, check=False))


def test_unknown_reward_and_unrunnable_precision(run_cli, tmp_path):
    proc = run_cli("train", str(TINY), "--run-dir", str(tmp_path / "r"), "--set", "rewards={bogus: 1.0}", check=False)
    assert_one_line_error(proc, "bogus")
    proc = run_cli("train", str(TINY), "--run-dir", str(tmp_path / "r"), "--set", "explore.precision=nvfp4",
                   check=False)
    assert_one_line_error(proc, "nvfp4_emulated")  # says what this machine can run
