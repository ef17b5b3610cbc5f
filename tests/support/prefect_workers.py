"""Helpers for tests that run stages on Prefect work pools: process workers as subprocesses, and API reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterName,
    FlowRunFilter,
    FlowRunFilterParentFlowRunId,
    WorkerFilter,
    WorkerFilterStatus,
)
from prefect.client.schemas.sorting import FlowRunSort
from prefect.settings import PREFECT_API_URL, temporary_settings

from cli_processes import sigint_as_at_a_terminal
from repo_paths import ROOT

# Workers poll every second (default 10 s) so that stage runs start at once.
WORKER_ENV = {"PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_HEARTBEAT_SECONDS": "5",
              "PREFECT_LOGGING_LEVEL": "INFO"}


@contextmanager
def api(env: dict[str, str]):
    """A sync Prefect client on the session's server."""
    with temporary_settings(updates={PREFECT_API_URL: env["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as client:
            yield client


def online_workers(env: dict[str, str], pool: str) -> int:
    with api(env) as client:
        try:
            return len(client.read_workers_for_work_pool(
                pool, worker_filter=WorkerFilter(status=WorkerFilterStatus(any_=["ONLINE"])), offset=0, limit=50))
        except Exception:  # noqa: BLE001 - the pool is created by the worker when it starts
            return 0


@contextmanager
def process_workers(env: dict[str, str], pools: list[str], log_dir: Path, timeout: float = 180, cwd: Path = ROOT):
    """One `prefect worker start --pool P --type process` per pool, started in `cwd` (its flow runs work there),
    online when this yields; stopped after."""
    procs = []
    try:
        for pool in pools:
            log = open(log_dir / f"worker-{pool}.log", "w")
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process"],
                env={**env, **WORKER_ENV}, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=sigint_as_at_a_terminal,
            ))
        deadline = time.time() + timeout
        while not all(online_workers(env, pool) for pool in pools):
            assert time.time() < deadline, f"workers did not come online; see {log_dir}"
            assert all(p.poll() is None for p in procs), f"a worker exited; see {log_dir}"
            time.sleep(1)
        yield procs
    finally:
        for proc in procs:  # each worker leads its own process group (a flow run it started leads another)
            try:
                os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C; a worker lingers on SIGTERM
            except ProcessLookupError:
                continue
        deadline = time.time() + 5  # a worker takes its time to shut down cleanly; nothing of it is needed
        for proc in procs:
            try:
                proc.wait(timeout=max(deadline - time.time(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def deployment_runs(env: dict[str, str], deployment: str, run_dir: Path | None = None) -> list:
    """Flow runs of `flow/deployment` (those of `run_dir` only, when given), oldest first."""
    with api(env) as client:
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment.split("/", 1)[1]])),
            sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=200)
    runs = [r for r in runs if run_dir is None or r.parameters.get("run_dir") == str(run_dir)]
    return sorted(runs, key=lambda r: r.created)


def child_runs(env: dict[str, str], flow_run_id) -> list:
    """Flow runs whose parent is `flow_run_id` (subflows and linked deployment runs), at any depth."""
    out, frontier = [], [flow_run_id]
    with api(env) as client:
        while frontier:
            children = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier)),
                sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=200)
            out += children
            frontier = [c.id for c in children]
    return out


def committed(pool_zarr: Path) -> int:
    """Rows committed in a candidate pool being written (0 while it does not exist yet)."""
    import zarr

    try:
        return int(zarr.open_group(pool_zarr, mode="r").attrs["committed"])
    except Exception:  # noqa: BLE001 - not created yet, or being created
        return 0


def row_mtimes(pool_zarr: Path, rows: int):
    """When each of the first `rows` candidates' image was last written (one zarr chunk file per row)."""
    import numpy as np

    out = []
    for row in range(rows):
        files = list((pool_zarr / "image").glob(f"c.{row}.*"))  # solrl_core.run.pool.FLAT_KEYS: c.<row>.0.0.0
        out.append(max(p.stat().st_mtime for p in files))
    return np.array(out)


def assert_resumed_then_equal_to_a_fresh_explore(run_dir: Path, rows: int, killed_at: float, min_kept: int) -> None:
    """The explore pool of iteration 0 after a kill at `killed_at` and a re-run: rows committed before the kill were
    kept (at least `min_kept`), the others written after it; and the pool equals a forced, uninterrupted explore."""
    import numpy as np

    from solrl_core.run.pool import read_table
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_config import load_run_config
    from solrl_core.stages.runner import run_stage

    pool = run_dir / "iter_0000" / "explore" / "pool.zarr"
    mtimes = row_mtimes(pool, rows)
    kept = int((mtimes < killed_at).sum())  # the committed rows, and any batch finished as the process died
    assert min_kept <= kept < rows and (mtimes[:kept] < killed_at).all() and (mtimes[kept:] > killed_at).all()
    resumed, attrs = read_table(pool)
    assert attrs["committed"] == rows
    # the forced explore `solrl stage explore --force` runs, here (the command through the CLI:
    # tests/e2e/test_readme_commands.py)
    run = RunDir(run_dir)
    with run.hold():
        run_stage(run, load_run_config(run), 0, "explore", force=True, progress=False)
    fresh, _ = read_table(pool)
    for key in resumed:
        np.testing.assert_array_equal(resumed[key], fresh[key], err_msg=key)


def wait_for(predicate, timeout: float, what: str, poll: float = 0.1, alive=None) -> None:
    """Poll `predicate` until true; fail the test after `timeout` s, or as soon as `alive()` says the process ended."""
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        assert alive is None or alive(), f"gave up waiting for {what}: the process ended"
        time.sleep(poll)
