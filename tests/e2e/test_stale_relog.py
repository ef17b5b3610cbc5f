"""MLflow logging after a re-run (flows/tracking.py log_metrics_once): a recomputed value is logged again, an
unchanged one is not (re-runs and staleness in the run directory: tests/unit/run/test_stale.py)."""

from __future__ import annotations


import pytest


@pytest.mark.e2e  # mlflow.start_run runs git
def test_a_recomputed_value_is_logged_again_and_an_unchanged_one_is_not(tmp_path):
    import mlflow

    from solrl.flows.tracking import log_metrics_once

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns.db'}")
    experiment = mlflow.create_experiment("stale", artifact_location=(tmp_path / "artifacts").as_uri())
    with mlflow.start_run(experiment_id=experiment) as active:
        run_id = active.info.run_id
    assert log_metrics_once(run_id, {"loss/total": 1.5, "reward/train_mean": 0.25}, 0) == \
        {"loss/total": 1.5, "reward/train_mean": 0.25}
    # the iteration computed again after a forced stage upstream: only what changed is logged
    assert log_metrics_once(run_id, {"loss/total": 1.25, "reward/train_mean": 0.25}, 0) == {"loss/total": 1.25}
    history = mlflow.MlflowClient().get_metric_history(run_id, "loss/total")
    assert sorted(m.value for m in history if m.step == 0) == [1.25, 1.5]
