"""The evaluation flow: held-out rewards of a run's policy after a given number of iterations."""

from __future__ import annotations

from prefect import flow

from solrl.flows.tracking import log_evaluation
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import load_run_config
from solrl.tasks.evaluate import evaluate_task


@flow(name="solrl-eval", flow_run_name="eval-step{step}")
def evaluation_flow(run_dir: str, step: int, progress: bool = True) -> dict:
    evaluation = evaluate_task(run_dir, step, progress=progress)
    run = RunDir(run_dir)
    log_evaluation(run, load_run_config(run), evaluation)
    return evaluation
