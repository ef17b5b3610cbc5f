"""Every command the user documentation shows is checked here, so the documentation cannot drift from the program.

The commands are read from the pages themselves (doc_pages(): README.md and docs/*.md; not docs/lab/, whose pages are
dated lab records, nor the generated pages and blocks, whose generators are tested against them): each line of their
```bash blocks (with commands quoted in their comments) and each inline `code` span that starts with a command a
user types (solrl, make, prefect, mlflow, dask, python, pip, source, export). Commands for another machine that
cannot be checked here (docs/gpu.md's, run on a bare GPU image) sit in ```sh blocks, which are not read. Each one is

* checked where that is cheap and real: `solrl` commands parse with the CLI's own parser (synopses: the subcommand
  and every option exist), the files they name exist; make targets exist (`make -n`); prefect/mlflow/dask
  subcommands exist with every option used (`--help`); `python -m` modules exist and accept the options used;
* run, by a test of this file (cheap ones: help, plan, rewards list, make-tiny, status/inspect/eval/stage on a tiny
  run made here, the Prefect API snippet against the test server, `make help`), or by the end-to-end test named in
  ELSEWHERE (training, deployment, work pools, servers, the benchmark), which must exist.

A command the registries below do not know fails the test: add it here (with its check), or remove it from the
page that shows it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

import pytest

from cli_processes import SMALLER_EVAL, SMALLER_RUN, solrl, tracking_set
from repo_paths import ROOT, TINY

pytestmark = pytest.mark.e2e
README = ROOT / "README.md"
DOCS = ROOT / "docs"
GENERATED_PAGES = {"config.md", "quant_coverage.md"}  # written by their generators (the config reference, the coverage)
GENERATED_BLOCK = re.compile(r"<!-- (\w+):begin -->.*?<!-- \1:end -->", flags=re.S)  # e.g. docs/planner.md's compare
BIN = Path(sys.executable).parent
COMMAND_WORDS = {"solrl", "make", "prefect", "mlflow", "dask", "python", "pip", "source", "export"}
ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z_]*|<[^>]+>|\.\.\.|\[.*|.*\]|\|)$")  # CONFIG, DIR, <stage>, [--x X], ...

# Where a command too long to run here is run end to end (file::test; checked to exist).
PIPELINE = "tests/e2e/test_pipeline.py::test_one_iteration_of_the_demo_config"
POOLS = "tests/e2e/test_work_pools.py::test_iteration_runs_its_stages_on_their_pools"
DEPLOY = "tests/e2e/test_deploy.py::test_deploy_registers_pools_training_with_schedule_and_stages"
DEPLOY_RUN = "tests/e2e/test_deploy.py::test_a_worker_started_in_another_directory_runs_a_stage_deployment"
BENCH = "tests/e2e/test_audit_bench.py::test_bench_report_of_two_families"
MATRIX = "tests/e2e/test_learning_matrix_cli.py::test_the_cells_asked_for_train_first_and_the_rest_later"
NODES = "tests/e2e/test_distributed_update_processes.py::test_two_nodes_on_loopback_give_the_one_process_update"
SERVERS = "tests/e2e/test_servers.py::test_prefect_ui_calls_the_api_of_its_own_port"
MAKE_SERVER = "tests/e2e/test_servers.py::test_make_server_starts_prefect_through_flows_servers"
DASK = "tests/e2e/test_explore_shards_processes.py::test_explore_through_a_running_dask_cluster_equals_one_device"
PRETRAIN = "tests/lab/test_embedded_pretrain.py::test_pretraining_is_reproducible_from_the_seed"
PRETRAIN_VIDEO = "tests/lab/test_embedded_pretrain.py::test_the_motion_world_pretrains_a_video_model"
VIDEO_DEMO = "tests/unit/stages/test_video_iteration.py::test_the_embedded_video_model_trains_in_its_world"
COVERAGE = "tests/lab/test_quant_coverage.py::test_markdown_and_doc_are_current"
MEMORY = "tests/unit/planner/test_model_sizes.py::test_memory_estimate_adds_up"
BACKBONES = "tests/e2e/test_backbone_pipelines.py::test_one_sol_rl_iteration_of_the_official_preset_on_a_tiny_model"
REWARDS_CHECK = "tests/e2e/test_cli_rewards.py::test_rewards_check_scores_each_tiny_checkpoint"
FAULTS = "tests/lab/test_faults.py::test_fault_ends_in_one_line_and_the_run_resumes_identical"
MLFLOW_UI = "tests/e2e/test_mlflow_pools.py::test_inspect_prints_the_mlflow_link_of_the_pool"
DOCTOR = "tests/unit/doctor/test_doctor.py::test_solrl_doctor_json"
DOCTOR_BENCH = "tests/unit/doctor/test_doctor.py::test_bench_on_cpu_at_tiny_size_writes_a_report_the_planner_reads"  # CPU, tiny
PAPER = "tests/unit/planner/test_planner.py::test_compare_rows_and_doc_table"  # the same table, in-process (2+ min as a CLI)
CI = ".ci/run"  # `make test` is what CI runs
CONFIG_EXPLAIN = "tests/unit/config/test_config_explain.py::test_solrl_config_explain_and_its_error"  # in process, as make-tiny
CONFIG_DOC = "tests/unit/config/test_config_explain.py::test_checked_in_reference_equals_the_generator_output"
LEARNED_DISTILL = "tests/lab/test_embedded_distill.py::test_distill_writes_a_scorer_the_reward_loads_and_that_learned_something"
LEARNED_DEMO = "tests/unit/rewards/test_learned_reward.py::test_the_learned_demo_trains_on_the_learned_reward_and_evaluates_gold"
S3_RUN = "tests/e2e/test_s3_rundir.py::test_one_iteration_into_s3"  # train and status with an s3:// run directory
CALIBRATE = "tests/unit/planner/test_explore_policies.py::test_calibrate_explore_writes_a_config_that_trains"
SIBLING_DISTILL = "tests/lab/test_embedded_sibling.py::test_distill_sibling_writes_a_model_directory_to_explore_with"
REPORT_ONLY = "tests/unit/bench/test_bench_stats.py::test_solrl_bench_quick_errors_are_one_line"  # --report-only, shipped config
SERVE_REWARD = "tests/e2e/test_serve_reward.py::test_a_served_reward_scores_a_batch_as_in_process"

HERE = "run by this file"
CHECKED = "checked by this file, not run"  # environment commands; a benchmark of minutes: its options and files
# solrl subcommands: where each is run. Concrete commands (in the docs) of an expensive subcommand are listed one by one
# in SOLRL_CONCRETE; synopses (CONFIG, DIR, [--option X]) are checked against the parser and run through the
# subcommand's entry.
SOLRL_SUBCOMMANDS = {
    "train": PIPELINE, "deploy": DEPLOY, "stage": HERE, "status": HERE, "inspect": HERE, "eval": HERE,
    "plan": HERE, "rewards": HERE, "bench": BENCH, "matrix": MATRIX, "pretrain": PRETRAIN, "update-node": NODES,
    "make-tiny": HERE,
    "config": CONFIG_EXPLAIN,
    "distill-reward": LEARNED_DISTILL,
    "doctor": DOCTOR,  # `solrl doctor --gpu-bench` needs CUDA: its logic runs on a CPU in DOCTOR_BENCH
    "presets": "tests/unit/config/test_packaged_configs.py::test_presets_lists_every_packaged_config_with_model_family_objective_and_reward",
    "calibrate-explore": CALIBRATE,
    "distill-sibling": SIBLING_DISTILL,
    "serve-reward": SERVE_REWARD,
}
SOLRL_CONCRETE = {
    "solrl doctor --gpu-bench": "tests/e2e/test_doctor_gpu_bench.py::test_gpu_bench_without_cuda_is_one_line_exit_2_and_imports_no_prefect",
    "solrl plan --paper --calibration DIR/report.json":
        "tests/unit/planner/test_planner_calibration.py::test_paper_comparison_shows_calibrated_errors_beside_stated",
    "solrl config --explain train.optimizer": CONFIG_EXPLAIN,
    "solrl config --explain": CONFIG_EXPLAIN,
    "solrl config --show configs/demo.yaml --set select.k=4":
        "tests/unit/config/test_config_explain.py::test_solrl_config_show_prints_the_resolved_config",
    "solrl train configs/demo.yaml": PIPELINE,
    "solrl train configs/demo.yaml --run-dir runs/demo": PIPELINE,  # what `make demo` runs
    "solrl train configs/demo_learned.yaml": LEARNED_DEMO,
    "solrl train configs/demo_video.yaml": VIDEO_DEMO,
    "solrl pretrain --out DIR --world motion": PRETRAIN_VIDEO,
    "solrl pretrain --out DIR --world edits":
        "tests/lab/test_embedded_pretrain.py::test_the_edits_world_fine_tunes_the_image_model_into_an_editing_one",
    "solrl distill-reward --out DIR": LEARNED_DISTILL,
    "solrl train configs/pools.yaml": POOLS,
    "solrl deploy configs/pools.yaml --set iterations=2 --interval 600": DEPLOY,
    "solrl update-node --run-dir s3://bucket/runs/NAME": NODES,
    "solrl bench configs/bench.yaml": BENCH,
    "solrl bench configs/bench.yaml --quick": "tests/unit/bench/test_bench_stats.py::test_solrl_bench_quick_errors_are_one_line",
    "solrl matrix configs/learning_matrix.yaml": MATRIX,  # hours: the same command on a tiny matrix config
    "solrl matrix configs/learning_matrix.yaml --set seeds=3 --cell 'image_full/*'": MATRIX,  # --cell, --set there
    "solrl matrix configs/learning_matrix.yaml --set seeds=7 --cell 'edit/*'": MATRIX,
    "solrl matrix configs/learning_matrix.yaml --set seeds=3 --cell 'video*/*/*'": MATRIX,
    "solrl bench configs/bench_families.yaml":  # hours: its config checked against the protocol, its families run
        "tests/unit/bench/test_bench_stats.py::test_shipped_bench_config_meets_the_protocol",
    "solrl bench configs/bench_flow_grpo.yaml": "tests/unit/bench/test_bench_stats.py::"
                                                "test_the_flow_grpo_bench_trains_plain_and_cheap_explore_with_flow_grpo_under_the_same_protocol",
    # the real backbones: the same presets on tiny random-weight models of each architecture
    "solrl rewards check --config flux1_sol_rl_pickscore": REWARDS_CHECK,
    "solrl train flux1_sol_rl_pickscore --set model.path=/models/FLUX.1-dev": BACKBONES,
    "solrl train sd35l_sol_rl_hpsv2 --set model.path=/models/stable-diffusion-3.5-large": BACKBONES,
    "solrl train sana_sol_rl_imagereward --set model.path=/models/Sana_1600M_1024px_diffusers":
        BACKBONES,
    "solrl make-tiny flux1 /tmp/tiny-flux": HERE,  # into a temporary directory
    "solrl make-tiny flux1-kontext /tmp/tiny-kontext":  # and its editing iteration
        "tests/e2e/test_edit_iteration.py::test_an_edit_iteration_carries_each_prompts_source_through_every_stage",
    # packaged configs by name: the preset (resolved as the docs write it) and the demo from an installed wheel
    "solrl train flux1_sol_rl_pickscore --set model.path=...":
        "tests/unit/config/test_packaged_configs.py::test_a_preset_is_named_as_the_docs_write_it",
    "solrl train demo": "tests/e2e/test_wheel_install.py::test_the_installed_cli_runs_alone_from_an_empty_directory",
    "solrl presets --write NAME FILE":
        "tests/unit/config/test_packaged_configs.py::test_write_gives_a_file_that_works_anywhere_and_refuses_to_overwrite",
    "solrl train flux1_sol_rl_pickscore --iterations 1 --set model.path=/tmp/tiny-flux": BACKBONES,
    "solrl stage explore --run-dir runs/demo-pools --iteration 0 --force": HERE,
    "solrl plan flux1_sol_rl_pickscore --gpu h100 --gpus 4 --price 2.5": HERE,
    "solrl plan flux1 --gpu h100": HERE,
    "solrl plan wan22_sol_rl_pickscore --gpu b200": HERE,
    "solrl plan wan_sol_rl_pickscore --gpu b200 --set explore.decode.scale=0.5": HERE,
    "solrl plan --paper": PAPER,
    "solrl rewards list": HERE,
    "solrl serve-reward pickscore --config flux1_sol_rl_pickscore --port 8000": SERVE_REWARD,  # a tiny reward there
    "solrl bench configs/bench.yaml --report-only": REPORT_ONLY,
    # after `make demo` (README, docs/getting-started.md): the same commands run here on a tiny run
    "solrl status --run-dir runs/demo": HERE,
    "solrl inspect --run-dir runs/demo --iteration 23": HERE,
    "solrl eval --run-dir runs/demo --step 10": HERE,
    # docs/operations.md: a run directory on S3, another training machine of a multi-node update
    "solrl train configs/demo.yaml --run-dir s3://my-bucket/runs/demo": S3_RUN,
    "solrl status --run-dir s3://my-bucket/runs/demo": S3_RUN,
    "solrl update-node --run-dir /shared/runs/demo": NODES,
}
MAKE_TARGETS = {"demo": PIPELINE, "test": CI, "test-fast": CI, "setup": CI, "bench": BENCH, "server": MAKE_SERVER,
                "help": HERE}
TOOL_COMMANDS = {  # (tool, subcommand words): where it runs against this project
    ("prefect", "server start"): SERVERS,
    ("prefect", "worker start"): POOLS,
    ("prefect", "deployment run"): DEPLOY_RUN,
    ("mlflow", "ui"): MLFLOW_UI,  # `solrl train` (so `make demo`) and `solrl inspect` print this line
    ("mlflow", "server"): MAKE_SERVER,
    ("dask", "scheduler"): DASK,
    ("dask", "worker"): DASK,
}
PYTHON_MODULES = {
    "solrl_core.lab.quant_coverage": COVERAGE, "solrl_core.planner.memory": MEMORY,
    "solrl.flows.servers": MAKE_SERVER, "solrl.flows.lab.devices_bench": CHECKED,  # its options and files (minutes to run)
    "solrl_core.config.explain": CONFIG_DOC,
    "solrl_core.doctor": DOCTOR_BENCH,
    "solrl_core.bench.fidelity_sweep": "tests/unit/bench/test_fidelity_sweep.py::test_lora_branch_at_full_precision_ranks_as_the_merged_copy",
    "solrl_core.bench.compiled_vs_eager":
        "tests/unit/bench/test_compiled_vs_eager.py::test_the_benchmark_measures_both_copies_and_writes_its_numbers",
    "solrl.flows.lab.prefect_latency": "tests/lab/test_prefect_latency.py::test_times_empty_flow_runs_against_the_api",
    "solrl.flows.lab.faults": FAULTS,  # the whole catalogue takes about 25 minutes: one case of each kind runs in the suite
    "solrl":  # the command line as a module, run from a directory with a user's own flows/tasks/configs packages
        "tests/e2e/test_wheel_install.py::test_a_users_own_flows_tasks_and_configs_neither_shadow_solrl_nor_are_shadowed",
    "solrl_core.doctor.acceptance":  # on a GPU only; its CPU path
        "tests/unit/doctor/test_acceptance.py::test_acceptance_on_cpu_reports_every_step_and_a_failure_stops_none",
}


# ---- reading the documentation ----------------------------------------------------------------------------------
def _split_and(line: str) -> list[str]:
    return [part.strip() for part in line.split("&&") if part.strip()]


def _commands_in_comment(comment: str) -> list[str]:
    """Commands quoted in a block's comment, e.g. "# other ports: make server PREFECT_PORT=4300"."""
    match = re.search(r"(?:^|: )((?:solrl|make|prefect|mlflow|dask) .*)$", comment.strip())
    return [match.group(1).strip()] if match else []


def block_commands(text: str) -> tuple[list[str], list[str]]:
    """(the commands of every ```bash block, the bodies of their heredocs)."""
    commands, heredocs = [], []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        lines = iter(block.splitlines())
        for raw in lines:
            line = raw.strip()
            if not line:
                continue
            if line.startswith("#"):
                commands += _commands_in_comment(line[1:])
                continue
            if "<<'EOF'" in line:
                body = []
                for inner in lines:
                    if inner.strip() == "EOF":
                        break
                    body.append(inner)
                commands.append(line)
                heredocs.append(_dedent(body))
                continue
            code, _, comment = line.partition(" #")
            commands += _commands_in_comment(comment)
            code = code.strip()
            if re.match(r"^(for .*; do|done)$", code):
                continue  # shell syntax around the commands
            commands += [part.removesuffix("&").strip() for part in _split_and(code)]
    return commands, heredocs


def _dedent(lines: list[str]) -> str:
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines)


def inline_commands(text: str) -> list[str]:
    """Inline `code` spans outside the blocks that start with a command word (after VAR=value assignments)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    found = []
    for span in re.findall(r"`([^`]+)`", prose):
        span = " ".join(span.replace("\\|", "|").split())
        for part in _split_and(span):
            words = part.split()
            while words and ENV_ASSIGNMENT.match(words[0]):
                words.pop(0)
            if len(words) > 1 and words[0] in COMMAND_WORDS:  # one word: the program's name in a sentence
                found.append(part)
    return found


def doc_pages() -> list[Path]:
    """The pages whose commands are read: the README and the user docs (docs/lab/ is a folder: not globbed)."""
    return [README] + sorted(page for page in DOCS.glob("*.md") if page.name not in GENERATED_PAGES)


def page_text(text: str) -> str:
    """A page without its generated blocks."""
    return GENERATED_BLOCK.sub("", text)


@cache
def doc_commands() -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(every command of the pages, the heredocs' bodies, the pages that show each command)."""
    commands, heredocs, shown = [], [], {}
    for page in doc_pages():
        text = page_text(page.read_text())
        blocks, bodies = block_commands(text)
        heredocs += bodies
        for command in dict.fromkeys(blocks + inline_commands(text)):
            shown.setdefault(command, []).append(str(page.relative_to(ROOT)))
            commands.append(command)
    return list(dict.fromkeys(commands)), heredocs, shown


def _shown(command: str) -> str:
    return f"`{command}` ({', '.join(doc_commands()[2].get(command, ['?']))})"


def _program(command: str) -> tuple[list[str], list[str]]:
    """(the VAR=value assignments before it, the command's words) of one command line (shell quoting honoured)."""
    words = shlex.split(command.split("<<")[0])
    env = []
    while words and ENV_ASSIGNMENT.match(words[0]):
        env.append(words.pop(0))
    return env, words


# ---- checks -----------------------------------------------------------------------------------------------------
def _where_run(where: str) -> None:
    """`where` names a test that exists (or this file, or CI's script)."""
    if where in (HERE, CHECKED):
        return
    if where == CI:
        assert "make test" in (ROOT / CI).read_text()
        return
    path, _, name = where.partition("::")
    assert re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), flags=re.M), f"{where} does not exist"


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    from solrl.cli.main import build_parser

    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def _is_synopsis(words: list[str]) -> bool:
    return len(words) <= 2 or any(PLACEHOLDER.match(w) for w in words[2:]) or "|" in " ".join(words)


def check_solrl(command: str) -> str:
    _, words = _program(command)
    subparsers = _subparsers()
    name = words[1] if len(words) > 1 else None
    assert name in subparsers, f"`{command}`: no subcommand '{name}' (solrl has {sorted(subparsers)})"
    options = {o for action in subparsers[name]._actions for o in action.option_strings}
    used = {w.split("=")[0].strip("[]") for w in words if w.lstrip("[").startswith("--")}
    assert used <= options, f"`{command}`: solrl {name} has no option {sorted(used - options)}"
    if _is_synopsis(words):
        return SOLRL_SUBCOMMANDS[name]
    assert command in SOLRL_CONCRETE, (f"{_shown(command)} is not checked: add it to SOLRL_CONCRETE in "
                                       "tests/e2e/test_readme_commands.py (with where it runs), or remove it from the page")
    from solrl.cli.main import build_parser

    try:
        build_parser().parse_args(words[1:])
    except SystemExit as exc:
        raise AssertionError(f"`{command}`: the CLI's parser refuses it") from exc
    _files_exist(command, words)
    return SOLRL_CONCRETE[command]


@cache
def _make_plan(target: str, *variables: str) -> str:
    # --no-print-directory: under `make test` this make is a sub-make, which would add "Leaving directory" lines
    proc = subprocess.run(["make", "-n", "--no-print-directory", target, *variables, f"VENV={sys.prefix}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"make -n {target}: {proc.stderr}"
    return proc.stdout


def check_make(command: str) -> str:
    _, words = _program(command)
    target, variables = words[1], words[2:]
    assert target in MAKE_TARGETS, (f"{_shown(command)}: make target '{target}' is not checked: add it to "
                                    "MAKE_TARGETS in tests/e2e/test_readme_commands.py, or remove it from the page")
    plan = _make_plan(target, *variables)
    for variable in variables:
        assert variable.split("=", 1)[1] in plan, f"`{command}`: {variable} does not reach the commands:\n{plan}"
    return MAKE_TARGETS[target]


# Runs each command line of the JSON list argv[1] in turn, in this one process, so that they share their imports
# (torch, diffusers, MLflow, Prefect) and caches: `python -m MODULE ...` as Python runs a module, `solrl ...` through
# the CLI's main() (what the `solrl` script calls), another program as its console script in the venv (argv[3]).
# Writes [[exit code, stdout, stderr], ...] to argv[2], each captured at the file descriptors.
IN_ONE_PROCESS = """\
import json, os, runpy, sys, tempfile, traceback
commands, results_path, bin_dir = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
results = []
for argv in commands:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush(); sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        try:
            if argv[:2] == ["python", "-m"]:
                sys.argv = argv[2:]
                runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
                code = 0
            elif argv[0] == "solrl":
                from solrl.cli.main import main
                code = main(argv[1:])
            else:
                sys.argv = [os.path.join(bin_dir, argv[0]), *argv[1:]]
                runpy.run_path(sys.argv[0], run_name="__main__")
                code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(saved[0], 1); os.dup2(saved[1], 2)
            os.close(saved[0]); os.close(saved[1])
        out.seek(0); err.seek(0)
        results.append([code, out.read().decode(errors="replace"), err.read().decode(errors="replace")])
with open(results_path, "w") as f:
    json.dump(results, f)
"""


def run_in_one_process(commands: list[list[str]], env: dict[str, str]) -> list[tuple[int, str, str]]:
    """(exit code, stdout, stderr) of each command line of `commands`, all run by one process (IN_ONE_PROCESS)."""
    results = Path(tempfile.mkstemp(suffix=".json", dir=_scratch())[1])
    proc = subprocess.run([sys.executable, "-c", IN_ONE_PROCESS, json.dumps(commands), str(results), str(BIN)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0 and results.stat().st_size, f"the commands' process failed: {proc.stderr[-3000:]}"
    return [tuple(result) for result in json.loads(results.read_text())]


def _ask_for_help(requests: list[tuple[str, ...]]) -> dict[tuple[str, ...], tuple[int, str]]:
    """(exit code, output) of `argv --help` for each argv of `requests` (console scripts of the venv: prefect,
    mlflow, dask; `python -m MODULE`), asked by one process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "PREFECT_HOME": str(_scratch() / "prefect")}
    answers = run_in_one_process([[*argv, "--help"] for argv in requests], env)
    return {argv: (code, out + err) for argv, (code, out, err) in zip(requests, answers)}


@cache
def _helps_of_the_docs() -> dict[tuple[str, ...], tuple[int, str]]:
    """The --help of every program the pages' commands name (each checked against its own), asked at once."""
    requests = (_help_argv(_program(command)[1]) for command in doc_commands()[0])
    return _ask_for_help(list(dict.fromkeys(argv for argv in requests if argv)))


@cache
def _help(*argv: str) -> str:
    helps = _helps_of_the_docs()
    code, text = helps[argv] if argv in helps else _ask_for_help([argv])[argv]
    assert code == 0, f"{' '.join(argv)} --help failed: {text[-2000:]}"
    return text


@cache
def _scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="solrl-readme-"))


def _files_exist(command: str, words: list[str]) -> None:
    for word in words:
        if word.startswith(("configs/", "tests/")):
            assert (ROOT / word).is_file(), f"`{command}`: {word} does not exist"


def _tool_key(words: list[str]) -> tuple[str, str] | None:
    """The TOOL_COMMANDS entry (tool, subcommand words) of a tool's command line, or None."""
    return next(((t, sub) for (t, sub) in TOOL_COMMANDS if t == words[0] and " ".join(words[1:]).startswith(sub)), None)


def _help_argv(words: list[str]) -> tuple[str, ...] | None:
    """The program whose --help a command's options are checked against (check_tool, check_python), or None."""
    if words[0] in ("prefect", "mlflow", "dask"):
        key = _tool_key(words)
        return (key[0], *key[1].split()) if key else None
    if words[:2] == ["python", "-m"] and len(words) > 2 and words[2] in PYTHON_MODULES:
        # argparse programs: they must accept the options used (solrl.flows.servers: run by MAKE_SERVER)
        return None if words[2] == "solrl.flows.servers" else ("python", "-m", words[2])
    return None


def check_tool(command: str) -> str:
    env, words = _program(command)
    tool = words[0]
    key = _tool_key(words)
    assert key, (f"{_shown(command)} is not checked: add it to TOOL_COMMANDS in tests/e2e/test_readme_commands.py, "
                 "or remove it from the page")
    text = _help(*_help_argv(words))
    for option in (w.split("=")[0] for w in words if w.startswith("--")):
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text), f"`{command}`: {tool} has no {option}"
    for assignment in env:
        _check_variable(command, assignment.split("=")[0])
    return TOOL_COMMANDS[key]


def _check_variable(command: str, name: str) -> None:
    """A variable a command sets is one its program reads: Prefect's settings, MLflow's variables, botocore's (the
    credentials and endpoint s3fs uses for s3:// run directories), PostgreSQL's client ones, or CUDA's device
    list."""
    if name.startswith("PREFECT_"):
        import prefect.settings

        assert hasattr(prefect.settings, name), f"`{command}`: Prefect has no setting {name}"
    elif name.startswith("MLFLOW_"):
        import mlflow.environment_variables

        assert hasattr(mlflow.environment_variables, name), f"`{command}`: MLflow has no variable {name}"
    elif name.startswith("AWS_"):
        import inspect

        import botocore.configprovider
        import botocore.credentials

        source = inspect.getsource(botocore.configprovider) + inspect.getsource(botocore.credentials)
        assert f"'{name}'" in source or f'"{name}"' in source, f"`{command}`: botocore reads no {name}"
    elif name.startswith("PG"):  # PostgreSQL's client variables: asyncpg (Prefect's driver) reads them as libpq does
        import inspect

        import asyncpg.connect_utils

        assert f"'{name}'" in inspect.getsource(asyncpg.connect_utils), f"`{command}`: asyncpg reads no {name}"
    else:
        assert name == "CUDA_VISIBLE_DEVICES", f"`{command}`: unknown variable {name}: check it here"


def check_python(command: str) -> str:
    _, words = _program(command)
    if words[:2] == ["python", "-"]:
        return HERE  # the heredoc: test_the_prefect_api_snippet_runs
    assert words[:2] == ["python", "-m"], f"{_shown(command)} is not checked: add it here or remove it"
    module = words[2]
    assert module in PYTHON_MODULES, (f"{_shown(command)}: module {module} is not checked: add it to "
                                      "PYTHON_MODULES in tests/e2e/test_readme_commands.py, or remove it from the page")
    assert importlib.util.find_spec(module), f"`{command}`: no module {module}"
    if argv := _help_argv(words):
        text = _help(*argv)
        for option in (w for w in words if w.startswith("--")):
            assert option in text, f"`{command}`: {module} has no option {option}"
    _files_exist(command, words)
    return PYTHON_MODULES[module]


def check_shell(command: str) -> str:
    """The environment commands: the venv the Makefile makes, variables their programs read, extras pyproject
    declares."""
    _, words = _program(command)
    if words[0] == "source":
        assert words[1] == ".venv/bin/activate"
        assert re.search(r"^VENV \?= \.venv$", (ROOT / "Makefile").read_text(), flags=re.M)
        assert re.search(r'^solrl = "solrl.cli.main:main"$', (ROOT / "pyproject.toml").read_text(), flags=re.M)
    elif words[0] == "export":
        for assignment in (w for w in words[1:] if ENV_ASSIGNMENT.match(w)):
            _check_variable(command, assignment.split("=")[0])
    elif words[0] == "pip":
        import tomllib

        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        target = words[-1].strip("'")
        match = re.fullmatch(r"\.(?:\[([\w-]+)\])?", target)
        assert words[:2] == ["pip", "install"] and match and (match.group(1) is None or match.group(1) in extras), command
        if "-c" in words:  # the tested set: the file the Makefile installs with
            assert words[words.index("-c") + 1] == "constraints.txt" and "-c constraints.txt" in (ROOT / "Makefile").read_text()
    return CHECKED


CHECKS = {"solrl": check_solrl, "make": check_make, "prefect": check_tool, "mlflow": check_tool,
          "dask": check_tool, "python": check_python, "source": check_shell, "export": check_shell,
          "pip": check_shell}


# ---- tests ------------------------------------------------------------------------------------------------------
def test_the_readme_reader_finds_block_inline_and_commented_commands():
    text = ("Run `solrl status --run-dir DIR` or `make demo`; not `solrl_core/x.py` nor `runs/demo/`.\n"
            "```bash\n# 1 - servers\nmake server   # other ports: make server PREFECT_PORT=4300\n"
            "source .venv/bin/activate && export A=1\nfor k in 0 1; do\n  X=$k dask worker tcp://h:1 &\ndone\n"
            "python - <<'EOF'\n  print(1)\nEOF\n```\n")
    blocks, heredocs = block_commands(text)
    assert blocks == ["make server PREFECT_PORT=4300", "make server", "source .venv/bin/activate", "export A=1",
                      "X=$k dask worker tcp://h:1", "python - <<'EOF'"]
    assert heredocs == ["print(1)"]
    assert inline_commands(text) == ["solrl status --run-dir DIR", "make demo"]


def test_the_pages_read_are_the_user_docs_without_lab_records_or_generated_text():
    pages = {str(page.relative_to(ROOT)) for page in doc_pages()}
    assert {"README.md", "docs/getting-started.md", "docs/operations.md", "docs/planner.md"} <= pages
    assert not [page for page in pages if page.startswith("docs/lab/")]
    assert not {"docs/config.md", "docs/quant_coverage.md"} & pages
    text = "`make demo`\n<!-- compare:begin -->\n`solrl plan flux1 --gpu b200`\n<!-- compare:end -->\n`make test`\n"
    assert inline_commands(page_text(text)) == ["make demo", "make test"]


def test_every_readme_command_is_known_checked_and_run_somewhere():
    commands, _, _ = doc_commands()
    assert len(commands) > 30  # the reader found the pages' commands
    report = []
    for command in commands:
        _, words = _program(command)
        check = CHECKS.get(words[0])
        assert check, f"{_shown(command)} is not checked: add it to tests/e2e/test_readme_commands.py or remove it"
        where = check(command)
        _where_run(where)
        report.append(f"{command}  ->  {where}")
    print("\n".join(report))


def test_the_registries_name_only_commands_the_readme_shows():
    """No stale entry: every concrete command listed here is still shown in the docs."""
    commands, _, _ = doc_commands()
    assert set(SOLRL_CONCRETE) <= set(commands), set(SOLRL_CONCRETE) - set(commands)
    shown = {_program(c)[1][1] for c in commands if c.startswith("make ")}
    assert set(MAKE_TARGETS) <= shown | {"help"}, set(MAKE_TARGETS) - shown


def test_help_of_solrl_and_of_every_subcommand(session_env):
    assert "usage: solrl" in solrl(session_env, "--help").stdout  # the entry point, started as a user starts it
    names = list(_subparsers())  # each subcommand's --help, all asked by one process (one start-up, not 20)
    for name, (code, out, err) in zip(names, run_in_one_process([["solrl", n, "--help"] for n in names], session_env)):
        assert code == 0 and f"usage: solrl {name}" in out.replace("\n", " "), (name, code, err[-2000:])


def test_make_help_lists_every_target_the_readme_shows():
    proc = subprocess.run(["make", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for target in MAKE_TARGETS:
        if target != "help":
            assert f"make {target} " in proc.stdout, target


@pytest.mark.parametrize("target", ["test", "test-fast"])
def test_make_test_fails_when_pytest_collects_nothing(tmp_path, target):
    """Both targets end in pytest on worker processes (`make test-fast` without the e2e and slow tests), which exits 5
    when no test is selected, so make fails: the target's own pytest options, on an empty folder."""
    command = _make_plan(target).strip().splitlines()[-1]  # the recipe's last command (after any `make setup`)
    python, _, options = command.partition(" -m pytest ")
    assert python.endswith(f"{sys.prefix}/bin/python") and "-n " in options, command
    assert ('-m "not e2e and not slow"' in options) == (target == "test-fast"), command
    proc = subprocess.run([sys.executable, "-m", "pytest", *shlex.split(options), "-q", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 5, proc.stdout


CHEAP_COMMANDS = [c for c, where in SOLRL_CONCRETE.items()
                  if where == HERE and c.startswith(("solrl plan", "solrl rewards"))]


@pytest.fixture(scope="module")
def cheap_commands_run(session_env) -> dict[str, tuple[int, str, str]]:
    """(exit code, stdout, stderr) of each cheap command, all run by one process: the plans share their imports and
    their model's FLOPs (counted once per process)."""
    return dict(zip(CHEAP_COMMANDS, run_in_one_process([shlex.split(c) for c in CHEAP_COMMANDS], session_env)))


@pytest.mark.parametrize("command", CHEAP_COMMANDS)
def test_cheap_readme_commands_run(cheap_commands_run, command):
    code, out, err = cheap_commands_run[command]
    assert code == 0, f"{command} failed ({code}):\n{err[-4000:]}"
    if command.startswith("solrl plan"):
        assert "sol_rl" in out and re.search(r"\d+\.\d", out), out  # seconds per stage and family
    else:
        assert all(name in out for name in ("embedded", "jpeg", "pickscore", "clipscore", "hpsv2", "imagereward"))


def test_solrl_make_tiny(session_env, tmp_path):
    solrl(session_env, "make-tiny", "flux1", str(tmp_path / "tiny-flux"))
    assert json.loads((tmp_path / "tiny-flux" / "model_index.json").read_text())["_class_name"] == "FluxPipeline"
    assert (tmp_path / "tiny-flux" / "solrl_tiny.yaml").is_file()


@pytest.fixture(scope="module")
def tiny_run(session_env, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("readme") / "run"
    solrl(session_env, "train", str(TINY), "--iterations", "1", "--run-dir", str(run_dir), "--quiet", *SMALLER_RUN,
          *SMALLER_EVAL, *tracking_set(session_env))
    # docs/operations.md: `solrl stage explore --run-dir runs/demo-pools --iteration 0 --force`, here on the tiny run
    out = solrl(session_env, "stage", "explore", "--run-dir", str(run_dir), "--iteration", "0", "--force", "--quiet")
    assert json.loads(out.stdout)
    # the same pool, bit for bit: it keeps its id and nothing after it is stale (docs/reliability.md), so the run
    # stays complete (`solrl status` below) with nothing for `solrl train` to recompute
    assert "made stale" not in out.stderr
    return run_dir


def test_run_commands_of_the_readme_on_a_tiny_run(session_env, tiny_run):
    """status, inspect and eval as the docs show them (synopses, and on `runs/demo`), on a run made here (and stage:
    above)."""
    run_dir = str(tiny_run)
    status = json.loads(solrl(session_env, "status", "--run-dir", run_dir, "--json").stdout)
    assert status["completed_iterations"] == 1
    assert "1 of 1 complete" in solrl(session_env, "status", "--run-dir", run_dir).stdout
    inspect = json.loads(solrl(session_env, "inspect", "--run-dir", run_dir, "--iteration", "0", "--json").stdout)
    assert inspect and "where it ran" in solrl(session_env, "inspect", "--run-dir", run_dir, "--iteration", "0").stdout
    solrl(session_env, "eval", "--run-dir", run_dir, "--step", "1", "--quiet")
    assert (tiny_run / "eval" / "step_0001" / "metrics.json").is_file()


def test_the_prefect_api_snippet_runs(session_env, tiny_run):
    """The Python snippet of docs/operations.md that lists stage runs with their pools runs against a Prefect server."""
    _, heredocs, _ = doc_commands()
    (snippet,) = [body for body in heredocs if "get_client" in body]
    proc = subprocess.run([sys.executable, "-"], input=snippet, env=session_env, cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "explore-it0" in proc.stdout  # the tiny run's `solrl stage explore` ran as a solrl-stage flow
