"""`solrl deploy` on a Prefect server: work pools, the training deployment with its schedule, one deployment per
stage, errors (without a server: tests/unit/cli/test_deploy_without_server.py)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
from prefect.client.schemas.sorting import FlowRunSort
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL, temporary_settings

from cli_processes import tracking_set
from repo_paths import TINY
from solrl.cli.main import main
from prefect_workers import api, process_workers
from solrl_core.config.loading import load_config, load_config_text
from solrl_core.run.pool import read_table
from solrl_core.prompts import prompt_set
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run_config import prepare_run
from solrl_core.stages.runner import run_stage

POOLS = {"explore": "dp-explore", "update": "dp-train"}
MAPPING = "{explore: dp-explore, update: dp-train}"
FLOW_POOL = "dp-flow"
NAME = "deploy-test"


def _sets(run_dir) -> list[str]:
    return ["--run-dir", str(run_dir), "--name", NAME, "--set", f"orchestration.work_pools={MAPPING}",
            "--set", f"orchestration.flow_pool={FLOW_POOL}"]


def _scheduled_runs(client, deployment_name: str) -> list:
    runs = client.read_flow_runs(
        deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment_name])),
        sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=50)
    return [r for r in runs if r.state_name == "Scheduled"]


def test_deploy_registers_pools_training_with_schedule_and_stages(run_cli, session_env, tmp_path, capsys):
    run_dir = tmp_path / "run"
    out = run_cli("deploy", str(TINY), "--interval", "3600", *_sets(run_dir)).stdout
    assert f"solrl-train-config/{NAME}" in out and "prefect worker start --pool dp-explore" in out

    with api(session_env) as client:
        for pool in (FLOW_POOL, *POOLS.values()):
            assert client.read_work_pool(pool).type == "process"
        train = client.read_deployment_by_name(f"solrl-train-config/{NAME}")
        # imported from the installed package, in the worker's directory: nothing points at this checkout
        assert train.work_pool_name == FLOW_POOL and train.entrypoint == "solrl.flows.training.train_config_flow"
        assert train.pull_steps == [] and train.path is None and train.job_variables["working_dir"] == "."
        # the config travels resolved (no file, no `extends` for the worker to find); the overrides beside it
        assert load_config_text(train.parameters["config"]) == load_config(TINY)
        assert "extends" not in train.parameters["config"] and train.parameters["run_dir"] == str(run_dir)
        assert train.parameters["overrides"] == [f"orchestration.work_pools={MAPPING}",
                                                 f"orchestration.flow_pool={FLOW_POOL}"]
        assert train.global_concurrency_limit.limit == 1
        (schedule,) = train.schedules
        assert schedule.active and schedule.schedule.interval == timedelta(seconds=3600)
        for stage in STAGES:
            pool = POOLS.get(stage, FLOW_POOL)
            dep = client.read_deployment_by_name(f"solrl-stage/{stage}@{pool}")
            assert dep.work_pool_name == pool and dep.entrypoint == "solrl.flows.stage.stage_flow"
            assert dep.pull_steps == [] and dep.job_variables["working_dir"] == "."
            assert dep.parameters == {"stage": stage, "hold": True, "progress": False}
            assert set(dep.parameter_openapi_schema["required"]) == {"run_dir", "stage", "iteration"}

        # the server's scheduler creates the upcoming runs, one interval apart
        deadline = time.time() + 60
        while len(runs := _scheduled_runs(client, NAME)) < 2 and time.time() < deadline:
            time.sleep(1)
        assert len(runs) >= 2, "the server's scheduler made no runs (Prefect 3.8.8's needs SQLAlchemy < 2.1)"
        gaps = {(b.expected_start_time - a.expected_start_time).total_seconds() for a, b in zip(runs, runs[1:])}
        assert gaps == {3600.0}
        assert all(r.parameters["run_dir"] == str(run_dir) for r in runs)

    # deploying again replaces the schedule: a cron expression, then none
    with temporary_settings(updates={PREFECT_API_URL: session_env["PREFECT_API_URL"]}):
        assert main(["deploy", str(TINY), "--cron", "0 3 * * *", *_sets(run_dir)]) == 0
        with api(session_env) as client:
            (schedule,) = client.read_deployment_by_name(f"solrl-train-config/{NAME}").schedules
            assert schedule.schedule.cron == "0 3 * * *"
        assert main(["deploy", str(TINY), *_sets(run_dir)]) == 0
        with api(session_env) as client:
            assert client.read_deployment_by_name(f"solrl-train-config/{NAME}").schedules == []
    capsys.readouterr()


def test_a_worker_started_in_another_directory_runs_a_stage_deployment(run_cli, session_env, tmp_path):
    """`solrl deploy` in one directory, a process worker started in another (neither is the checkout: the worker
    imports solrl from the installed package) runs a stage deployment to completion, in the worker's directory: the
    run's prompt file, a path relative to the working directory, is found there."""
    deployer, worker_dir = tmp_path / "deployer", tmp_path / "worker"
    deployer.mkdir(), worker_dir.mkdir()
    (worker_dir / "prompts.txt").write_text("\n".join(prompt_set("builtin:shapes-train", "prompts.train")))
    sets = ["--set", "prompts.train=prompts.txt", *tracking_set(session_env),
            "--set", "orchestration.work_pools={explore: dp-anywhere}", "--set", "orchestration.flow_pool=dp-anywhere"]
    cfg = load_config(TINY, [s for s in sets if s != "--set"])
    run = RunDir(tmp_path / "run")
    prepare_run(run, cfg)
    run_stage(run, cfg, 0, "quantize", progress=False)  # explore's input; reads no prompt

    run_cli("deploy", str(TINY), "--run-dir", str(run.root), "--name", "anywhere", *sets, cwd=deployer)
    with process_workers(session_env, ["dp-anywhere"], worker_dir, cwd=worker_dir):
        with api(session_env):
            flow_run = run_deployment("solrl-stage/explore@dp-anywhere", poll_interval=1, timeout=600,
                                      parameters={"run_dir": str(run.root), "iteration": 0})
    assert flow_run.state.is_completed(), (flow_run.state, (worker_dir / "worker-dp-anywhere.log").read_text()[-3000:])
    assert run.is_complete(0, "explore")
    _, attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr", ["seed"])
    assert attrs["committed"] == attrs["n_rows"] == 2 * 8


def test_deploy_name_names_the_run_directory_and_an_existing_run_is_said(session_env, tmp_path, monkeypatch, capsys):
    """`solrl deploy` in process, in `tmp_path` (the command through the CLI: the tests above)."""
    sets = ["--name", "dp-named", "--set", f"orchestration.flow_pool={FLOW_POOL}"]
    monkeypatch.chdir(tmp_path)

    def deploy() -> str:
        capsys.readouterr()
        with temporary_settings(updates={PREFECT_API_URL: session_env["PREFECT_API_URL"]}):
            assert main(["deploy", str(TINY), *sets]) == 0, capsys.readouterr().err[-3000:]
        return capsys.readouterr().out

    out = deploy()
    run_dir = tmp_path / "runs" / "dp-named"  # not runs/<the config's name>
    assert "already holds a run" not in out
    with api(session_env) as client:
        assert client.read_deployment_by_name("solrl-train-config/dp-named").parameters["run_dir"] == str(run_dir)

    run = RunDir(run_dir)
    with run.hold():
        prepare_run(run, load_config(TINY))
    out = deploy()
    iterations = load_config(TINY).iterations
    assert f"{run_dir} already holds a run (0 of {iterations} iterations complete): the deployment resumes it" in out


@pytest.mark.parametrize("args, message", [
    (["--name", "../elsewhere"], "--name '../elsewhere' holds a path separator"),
    (["--cron", "every night"], "--cron 'every night' is not a valid cron expression"),
    (["--interval", "0"], "--interval must be a positive number of seconds"),
    (["--set", "orchestration.work_pools={explor: p}"], "orchestration.work_pools: unknown stage 'explor'"),
])
def test_deploy_rejects_bad_input_in_one_line(session_env, args, message, capsys):
    with temporary_settings(updates={PREFECT_API_URL: session_env["PREFECT_API_URL"]}):
        assert main(["deploy", str(TINY), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_deploy_checks_the_tracking_uri_before_registering_anything(session_env, tmp_path, capsys):
    from prefect.exceptions import ObjectNotFound

    from cli_processes import free_port

    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    sets = ["--run-dir", str(tmp_path / "run"), "--name", "dp-no-tracking", "--set", f"tracking.uri={dead}",
            "--set", "orchestration.flow_pool=dp-no-tracking"]
    with temporary_settings(updates={PREFECT_API_URL: session_env["PREFECT_API_URL"]}):
        assert main(["deploy", str(TINY), *sets]) == 2
    err = capsys.readouterr().err.strip()
    assert f"tracking.uri = {dead}: no MLflow server answers" in err and len(err.splitlines()) == 1
    with api(session_env) as client:
        with pytest.raises(ObjectNotFound):
            client.read_deployment_by_name("solrl-train-config/dp-no-tracking")
        with pytest.raises(ObjectNotFound):
            client.read_work_pool("dp-no-tracking")
