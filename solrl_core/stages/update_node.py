"""`solrl update-node`: one more machine of a multi-node update (`train.nodes` > 1).

The machine that runs the update stage (in `solrl train`, `solrl stage update` or a stage deployment) starts torchrun
for itself when the stage begins. Each other training machine runs

    solrl update-node --run-dir DIR [--iteration N] [--attempts N]

which waits until an iteration's update can start (its inputs are complete in the run directory, which every machine
sees), then starts this machine's torchrun for it (`launch_update`: `train.processes` ranks meeting the others at
`train.rdzv_endpoint`), and goes on with the next iteration until the run's last is updated; with --iteration, that
iteration only. Everything it needs comes from the run directory: the config frozen there and the stage inputs.

When an update fails (a rank crashed, a machine's torchrun ended), the stage machine's task is retried and starts its
torchrun again under the same rendezvous id, so this machine joins the same iteration again: its new torchrun waits
at the rendezvous until the others arrive (about a minute for the store at `train.rdzv_endpoint` to listen, then
torchrun's join timeout). It goes on with the next iteration as soon as the update is complete (a new completion in
the run directory), and gives up after `attempts` failed joins of one iteration. An error the user must fix, passed
back by the ranks (a SolrlError), stops it at once: every machine meets it, and the stage is not retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from solrl_core.errors import SolrlError
from solrl_core.placement import check_update_devices
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import load_run_config
from solrl_core.stages.context import StageContext
from solrl_core.run.staleness import missing_inputs
from solrl_core.stages.update_launch import launch_update
from solrl_core.run.staleness import is_current

POLL_SECONDS = 5.0
JOIN_ATTEMPTS = 3  # joins of one iteration's update: the first, the stage task's retry, and one spare


def join_updates(run: RunDir, iteration: int | None = None, force: bool = False, poll_seconds: float = POLL_SECONDS,
                 say: Callable[[str], None] = print, attempts: int = JOIN_ATTEMPTS) -> dict[int, dict]:
    """This machine's part of the update of `iteration` (of every iteration not yet updated, when None); the stage
    summary of each update it took part in, by iteration. `force`: join `iteration` even when it is complete (the
    stage is being run again with --force). `attempts`: how many times to join one iteration's update that fails
    (see the module docstring); `poll_seconds`: the wait for inputs, and between two joins."""
    if attempts < 1:
        raise SolrlError(f"--attempts {attempts} is out of range: give 1 or more")
    cfg = load_run_config(run)
    if cfg.train.nodes == 1:
        raise SolrlError(f"train.nodes is 1 in {run.config_path}: the update runs on the machine of the stage alone, "
                         "there is nothing to join")
    check_update_devices(cfg)  # before waiting for anything
    if iteration is not None:
        if run.is_complete(iteration, "update") and not force:
            say(f"the update of iteration {iteration} is already complete (--force joins a forced re-run)")
            return {}
        return {iteration: _join(run, iteration, poll_seconds, attempts, say)}
    summaries, it = {}, 0
    while it < load_run_config(run).iterations:  # read again: continuing a run may raise its iteration count
        if not is_current(run, it, "update"):  # not done, or stale: the update runs (again)
            summaries[it] = _join(run, it, poll_seconds, attempts, say)
        it += 1
    return summaries


def _completion_id(run: RunDir, iteration: int) -> tuple | None:
    """What tells one commit of the update from another (None: not complete): its id and the time it was written (a
    re-run whose files are bit for bit the old ones keeps the old id: solrl_core/run/lineage.py kept_id)."""
    if not run.is_complete(iteration, "update"):
        return None
    manifest = run.manifest(iteration, "update")
    return manifest.get("id"), manifest.get("completed_at")


def _join(run: RunDir, iteration: int, poll_seconds: float, attempts: int, say: Callable[[str], None]) -> dict:
    if missing_inputs(run, iteration, "update"):
        say(f"waiting for the inputs of iteration {iteration}'s update in {run.root}")
        while missing_inputs(run, iteration, "update"):
            time.sleep(poll_seconds)
    replaced = _completion_id(run, iteration)  # what a forced or stale re-run replaces: not a new completion
    for attempt in range(1, attempts + 1):
        cfg = load_run_config(run)
        again = f" again (attempt {attempt} of {attempts})" if attempt > 1 else ""
        say(f"joining the update of iteration {iteration}{again}: {cfg.train.processes} process(es) here, "
            f"{cfg.train.nodes} machines at {cfg.train.rdzv_endpoint}")
        try:
            return launch_update(StageContext(run, cfg, iteration, progress=False))
        except SolrlError:
            raise  # an error in the update the user must fix: the stage machine meets it too and does not retry
        except RuntimeError:  # this machine's torchrun failed (its output is above)
            pass
        completed = _completion_id(run, iteration)
        if completed is not None and completed != replaced:
            say(f"the update of iteration {iteration} is complete (committed by the stage machine); going on")
            return run.manifest(iteration, "update")["summary"]
        if attempt < attempts:
            say(f"the update of iteration {iteration} failed on this machine; joining it again for the stage's retry")
            time.sleep(poll_seconds)
    raise SolrlError(f"the update of iteration {iteration} failed on this machine {attempts} time(s) (torchrun's "
                     f"output is above); when the update stage runs again, run `solrl update-node --run-dir "
                     f"{run.root}` again here (--attempts N joins an iteration's update up to N times)")
