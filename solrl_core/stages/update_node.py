"""`solrl update-node`: one more machine of a multi-node update (`train.nodes` > 1).

The machine that runs the update stage (in `solrl train`, `solrl stage update` or a stage deployment) starts torchrun
for itself when the stage begins. Each other training machine runs

    solrl update-node --run-dir DIR [--iteration N]

which waits until an iteration's update can start (its inputs are complete in the run directory, which every machine
sees), then starts this machine's torchrun for it (`launch_update`: `train.processes` ranks meeting the others at
`train.rdzv_endpoint`), and goes on with the next iteration until the run's last is updated; with --iteration, that
iteration only. Everything it needs comes from the run directory: the config frozen there and the stage inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from solrl_core.errors import SolrlError
from solrl_core.rundir import RunDir
from solrl_core.runs import load_run_config
from solrl_core.stages.context import StageContext
from solrl_core.stages.registry import missing_inputs
from solrl_core.stages.update_launch import launch_update
from solrl_core.staleness import is_current

POLL_SECONDS = 5.0


def join_updates(run: RunDir, iteration: int | None = None, force: bool = False, poll_seconds: float = POLL_SECONDS,
                 say: Callable[[str], None] = print) -> dict[int, dict]:
    """This machine's part of the update of `iteration` (of every iteration not yet updated, when None); the stage
    summary of each update it took part in, by iteration. `force`: join `iteration` even when it is complete (the
    stage is being run again with --force)."""
    cfg = load_run_config(run)
    if cfg.train.nodes == 1:
        raise SolrlError(f"train.nodes is 1 in {run.config_path}: the update runs on the machine of the stage alone, "
                         "there is nothing to join")
    if iteration is not None:
        if run.is_complete(iteration, "update") and not force:
            say(f"the update of iteration {iteration} is already complete (--force joins a forced re-run)")
            return {}
        return {iteration: _join(run, iteration, poll_seconds, say)}
    summaries, it = {}, 0
    while it < load_run_config(run).iterations:  # read again: continuing a run may raise its iteration count
        if not is_current(run, it, "update"):  # not done, or stale: the update runs (again)
            summaries[it] = _join(run, it, poll_seconds, say)
        it += 1
    return summaries


def _join(run: RunDir, iteration: int, poll_seconds: float, say: Callable[[str], None]) -> dict:
    if missing_inputs(run, iteration, "update"):
        say(f"waiting for the inputs of iteration {iteration}'s update in {run.root}")
        while missing_inputs(run, iteration, "update"):
            time.sleep(poll_seconds)
    cfg = load_run_config(run)
    say(f"joining the update of iteration {iteration}: {cfg.train.processes} process(es) here, "
        f"{cfg.train.nodes} machines at {cfg.train.rdzv_endpoint}")
    return launch_update(StageContext(run, cfg, iteration, progress=False))
