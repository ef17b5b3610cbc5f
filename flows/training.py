"""The training flow: iterations up to the configured count, each resumed from its first incomplete stage."""

from __future__ import annotations

from prefect import flow, get_run_logger

from flows.iteration import iteration_flow
from flows.tracking import ensure_mlflow_run, log_iteration
from solrl_core.rundir import RunDir
from solrl_core.runs import load_run_config


@flow(name="solrl-train", flow_run_name="train-{run_dir}")
def training_flow(run_dir: str, iterations: int, progress: bool = True) -> list[dict[str, float]]:
    run = RunDir(run_dir)
    cfg = load_run_config(run)
    ensure_mlflow_run(run, cfg)
    logger = get_run_logger()
    history = []
    for iteration in range(iterations):
        iteration_flow(run_dir, iteration, progress=progress)
        metrics = log_iteration(run, cfg, iteration)
        history.append(metrics)
        logger.info(
            "iteration %d: explore reward %.4f, train reward %.4f, loss %.4f",
            iteration,
            metrics["reward/explore_mean"],
            metrics["reward/train_mean"],
            metrics["loss/total"],
        )
    return history
