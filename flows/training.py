"""The training flow: `solrl_core.method.run_training` (iterations up to the configured count, each resumed from its
first incomplete (or stale) stage, the evaluations on the config's schedule, stale evaluations evaluated again) with
each iteration a Prefect flow, each evaluation a Prefect task, MLflow logging and progress around them; and
`train_config_flow`, what `solrl train CONFIG` does as one flow (the entry point of the training deployment)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from solrl.flows.iteration import iteration_flow
from solrl.flows.progress import IterationClock, stage_done
from solrl.flows.tracking import iteration_metrics, log_audit, log_evaluation, log_iteration
from solrl.flows.tracking_status import mlflow_run_training
from solrl.flows.tracking_queue import TrackingQueue
from solrl.tasks.evaluate import evaluate_task
from solrl.tasks.dask_shards import dask_shards
from solrl_core.config.loading import load_config_from
from solrl_core.method import run_training
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import load_run_config, prepare_run
from solrl_core.stages.audit import AUDIT


@flow(name="solrl-train", flow_run_name="train-{run_dir}")
def training_flow(run_dir: str, iterations: int, progress: bool = True) -> list[dict[str, float]]:
    run = RunDir(run_dir)
    cfg = load_run_config(run)
    logger = get_run_logger()
    history = []
    # one Dask cluster of device workers (several devices) for the whole run: each worker loads the model once and
    # keeps it for every stage, evaluation and update; this process loads none. MLflow logs in its own thread while
    # the next iteration computes; the MLflow run is RUNNING until every log is in
    with (mlflow_run_training(run, cfg), dask_shards() as shards, shards.models_on_workers(cfg),
          TrackingQueue() as tracking):
        clock = IterationClock(iterations)
        computed = {}

        def iterate(iteration: int) -> None:
            clock.begin()
            computed[iteration] = not run.is_complete(iteration, "update")
            iteration_flow(run_dir, iteration, progress=progress)

        def after_iteration(iteration: int) -> None:
            tracking.submit(log_iteration, run, cfg, iteration)
            metrics = iteration_metrics(run, iteration)
            history.append(metrics)
            clock.say(iteration, metrics, computed[iteration])
            if run.is_complete(iteration, AUDIT):
                tracking.submit(log_audit, run, cfg, iteration)
            logger.info("iteration %d: explore reward %.4f, train reward %.4f, loss %.4f", iteration,
                        metrics["reward/explore_mean"], metrics["reward/train_mean"], metrics["loss/total"])

        def evaluate(step: int) -> dict:
            if step == 0:
                return evaluate_task(run_dir, 0, progress=progress)
            with stage_done(progress, f"evaluation after {step} iterations"):
                return evaluate_task(run_dir, step, progress=progress)

        def after_evaluation(step: int, evaluation: dict) -> None:
            tracking.submit(log_evaluation, run, cfg, evaluation)
            if step:
                logger.info("evaluation after %d iterations: %s", step, evaluation["metrics"])

        run_training(run, cfg, iterations, iterate, evaluate, after_iteration, after_evaluation)
    return history


@flow(name="solrl-train-config", flow_run_name="train-config-{run_dir}")
def train_config_flow(config: str, run_dir: str, overrides: list[str] | None = None,
                      progress: bool = False) -> list[dict[str, float]]:
    """`solrl train CONFIG --run-dir RUN_DIR --set OVERRIDE ...`: start the run, or resume it to the configured
    iteration count (nothing new when complete).

    Args:
        config: the config as YAML text (what `solrl deploy` registers: resolved, no file needed), or a YAML file or
            a packaged config's name
        run_dir: the run directory
        overrides: config overrides KEY=VALUE, as `--set` takes them (e.g. iterations=12 extends the run)
        progress: progress bars
    """
    cfg = load_config_from(config, list(overrides or []))
    run = RunDir(run_dir)
    with run.hold():
        prepare_run(run, cfg)
        return training_flow(str(run.root), cfg.iterations, progress=progress)
