"""The one way a stage becomes a Prefect task, and the tasks of the steps: `STAGE_TASKS`, step name -> Prefect task
in the order of an iteration (solrl_core/run/stage_table.py names them; solrl_core/method.py says what each one
does), and `AUDIT_TASK`, the optional full-fidelity audit's.

The run directory is the cache: a stage whose manifest exists returns it without recomputing, whichever process or
pool runs it, so Prefect's own result caching is off (NO_CACHE). Prefect retries a stage that crashed; the stage
resumes from its committed rows. User errors (bad config, missing inputs) are not retried.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from solrl_core.run.rundir import RunDir
from solrl_core.run.stage_table import STAGES
from solrl_core.run_config import load_run_config
from solrl_core.stages.runner import run_stage
from solrl_core.run.storage import is_remote
from solrl_core.userfiles import format_bytes, tree_size, user_os_errors
from solrl.tasks.retry import retry_unless_user_error
from solrl.tasks.dask_shards import dask_shards  # splittable stages with several devices or a Dask cluster


def _space_needed(run: RunDir, iteration: int, stage: str) -> str | None:
    """What the stage needs on disk, about: the size of its artifact of the previous iteration (None without one)."""
    if iteration == 0 or is_remote(run.root) or not run.is_complete(iteration - 1, stage):
        return None
    return f"{format_bytes(tree_size(run.stage_dir(iteration - 1, stage)))} (as iteration {iteration - 1}'s)"


def make_stage_task(stage: str, retries: int = 1):
    @task(
        name=stage,
        task_run_name=f"{stage}-it{{iteration}}",
        retries=retries,
        retry_delay_seconds=1,
        retry_condition_fn=retry_unless_user_error,
        cache_policy=NO_CACHE,
        persist_result=False,
    )
    def stage_task(run_dir: str, iteration: int, force: bool = False, progress: bool = True) -> dict:
        run = RunDir(run_dir)
        # a full disk, missing permissions: one line naming the path (a SolrlError, so not retried)
        with user_os_errors(f"stage {stage} of iteration {iteration}", lambda: _space_needed(run, iteration, stage),
                            None if is_remote(run.root) else run.root), dask_shards():
            return run_stage(run, load_run_config(run), iteration, stage, force=force, progress=progress)

    stage_task.__doc__ = f"Run the '{stage}' stage of one iteration (skipped when its manifest exists)."
    return stage_task


STAGE_TASKS = {stage: make_stage_task(stage) for stage in STAGES}
AUDIT_TASK = make_stage_task("audit")  # the optional full-fidelity audit (not one of the pipeline's STAGES)
