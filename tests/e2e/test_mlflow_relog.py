"""Logging an iteration's metrics again (a training resumed after a stop mid-logging, or a schedule firing on a
complete run) adds nothing to the MLflow run: only metrics it has no value of at that step are logged."""

from __future__ import annotations

import mlflow
import numpy as np
import pytest
from PIL import Image

from solrl.flows.tracking import log_evaluation, log_metrics_once
from solrl_core.config.schema import RunConfig
from solrl_core.evaluate import eval_dir
from solrl_core.run.rundir import RunDir, write_json_atomic

pytestmark = pytest.mark.e2e  # mlflow.start_run runs `git` (the source version tag)


def _history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_metrics_already_logged_at_a_step_are_not_logged_again(tmp_path):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns.db'}")
    experiment = mlflow.create_experiment("relog", artifact_location=(tmp_path / "artifacts").as_uri())
    with mlflow.start_run(experiment_id=experiment) as active:
        run_id = active.info.run_id
    client = mlflow.MlflowClient()

    assert log_metrics_once(run_id, {"loss/total": 1.5, "reward/train_mean": 0.25}, 0) == \
        {"loss/total": 1.5, "reward/train_mean": 0.25}
    # the same iteration again, with a metric it did not have yet (e.g. logged by a newer solrl)
    assert log_metrics_once(run_id, {"loss/total": 1.5, "reward/train_mean": 0.25, "train/step": 2.0}, 0) == \
        {"train/step": 2.0}
    assert log_metrics_once(run_id, {"loss/total": 1.5, "reward/train_mean": 0.25, "train/step": 2.0}, 0) == {}
    assert log_metrics_once(run_id, {"loss/total": 1.25}, 1) == {"loss/total": 1.25}

    assert _history(client, run_id, "loss/total") == [(0, 1.5), (1, 1.25)]
    assert _history(client, run_id, "reward/train_mean") == [(0, 0.25)]
    assert _history(client, run_id, "train/step") == [(0, 2.0)]


def test_evaluation_logged_again_without_its_marker_is_not_duplicated(tmp_path):
    """A training stopped after logging an evaluation but before writing its marker, then resumed."""
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.create_experiment("relog-eval", artifact_location=(tmp_path / "artifacts").as_uri())
    with mlflow.start_run(experiment_id=experiment) as active:
        run_id = active.info.run_id
    run = RunDir(tmp_path / "run")
    write_json_atomic(run.run_json, {"tracking_uri": uri, "mlflow_run_id": run_id, "experiment_id": experiment})
    out = eval_dir(run, 0)
    out.mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(out / "samples.png")
    evaluation = {"step": 0, "metrics": {"hpsv2": 0.25}}

    log_evaluation(run, RunConfig(), evaluation)
    (out / "logged.json").unlink()
    log_evaluation(run, RunConfig(), evaluation)
    assert (out / "logged.json").is_file()
    assert _history(mlflow.MlflowClient(), run_id, "eval/hpsv2") == [(0, 0.25)]
