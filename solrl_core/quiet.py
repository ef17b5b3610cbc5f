"""Library chatter kept off the user's terminal, in every process that works for a command (the CLI's own, and the
Dask worker processes of split stages, whose output reaches the same terminal)."""

from __future__ import annotations

import logging
import os


PREFECT_QUEUE_WORKERS = ("EventsWorker", "APILogWorker")  # the loggers Prefect's queue services are named by


def quiet_libraries() -> None:
    """torch/torchao import notices and diffusers/transformers hints off; call before those libraries load."""
    # OpenMP threads that spin while waiting stall badly when the cores are shared (seen: 8x slower sampling).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    # MLflow logs a database error with its traceback before raising it; solrl's one line says it (flows/tracking.py)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    # Prefect's shutdown notices ("Still processing items: 12 items remaining...", while the events and logs of the
    # run are still being sent at exit) would come after the command's own last line, its error or its summary
    for worker in PREFECT_QUEUE_WORKERS:
        logging.getLogger(worker).setLevel(logging.ERROR)
