"""The MLflow run's status follows the training: RUNNING while `solrl train` (or a deployment's flow) trains it, then
FINISHED, KILLED (stopped: Ctrl-C, SIGTERM or SIGHUP, which reach the flow as KeyboardInterrupt: flows/signals.py) or
FAILED (an error), as MLflow's own `start_run` block ends a run. A resumed run is RUNNING again (MLflow keeps its
earlier end time until this one ends). A SIGKILL leaves it RUNNING: nothing runs after it; the next `solrl train` of
the run ends it properly."""

from __future__ import annotations

import contextlib

from solrl.flows.tracking import connect, ensure_mlflow_run, tracking_errors
from solrl_core.config.schema import RunConfig
from solrl_core.run.rundir import RunDir

_marking: set[str] = set()  # MLflow runs this process has marked RUNNING (the CLI's block around the flow's)


@contextlib.contextmanager
def mlflow_run_training(run: RunDir, cfg: RunConfig):
    """The run's MLflow run (made when it has none: `ensure_mlflow_run`), RUNNING for the block, then ended with the
    block's outcome; yields its run.json record. Nested for the same run in one process, only the outermost marks."""
    info = ensure_mlflow_run(run, cfg, keep_running=True)
    run_id = info["mlflow_run_id"]
    if run_id in _marking:
        yield info
        return
    client = connect(info["tracking_uri"]).MlflowClient()
    with tracking_errors(info["tracking_uri"], "the MLflow run's status", info):
        if client.get_run(run_id).info.status != "RUNNING":
            client.update_run(run_id, status="RUNNING")
    _marking.add(run_id)
    try:
        yield info
    except KeyboardInterrupt:
        _end(client, info, "KILLED")
        raise
    except BaseException:
        _end(client, info, "FAILED")
        raise
    else:
        with tracking_errors(info["tracking_uri"], "the MLflow run's status", info):
            client.set_terminated(run_id, "FINISHED")
    finally:
        _marking.discard(run_id)


def _end(client, info: dict, status: str) -> None:
    """End the MLflow run with `status` while the command ends with its own error, which stays the one reported (one
    line): when the store cannot take the status either (the usual case: the store is what failed), the run stays
    RUNNING in MLflow and `solrl status` reads the run directory, which says how the command ended."""
    try:
        client.set_terminated(info["mlflow_run_id"], status)
    except Exception:  # noqa: BLE001, S110 - the training's own error is the one to report
        pass
