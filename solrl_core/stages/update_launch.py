"""Start the update stage on several processes: torchrun runs `solrl_core.stages.update_worker` on every rank."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from solrl_core.config.schema import RunConfig, dump_config
from solrl_core.errors import SolrlError
from solrl_core.orphan_guard import guarded
from solrl_core.rl.distributed import check_setup, launch_command, launch_env, local_rendezvous, nodes_rendezvous
from solrl_core.stages.context import StageContext

WORKER_MODULE = "solrl_core.stages.update_worker"


def rendezvous_id(cfg: RunConfig, iteration: int) -> str:
    """The torchrun rendezvous id of one iteration's update: the same on every machine (from the run's config)."""
    return f"solrl-{cfg.name}-iter{iteration}"


def launch_update(ctx: StageContext) -> dict:
    """Run this machine's part of the update stage of `ctx` (`train.processes` local processes, and with
    `train.nodes` > 1 the other machines' torchruns joining); return the stage's summary."""
    tc = ctx.cfg.train
    check_setup(tc.dist_backend, ctx.cfg.model.device, tc.processes)
    with tempfile.TemporaryDirectory(prefix="solrl-update-") as tmp:
        tmp = Path(tmp)
        config = tmp / "config.yaml"
        config.write_text(dump_config(ctx.cfg))
        result = tmp / "result.json"
        args = ["--run-dir", str(ctx.run.root), "--iteration", str(ctx.iteration),
                "--config", str(config), "--result", str(result)]
        if tc.nodes == 1:
            args += ["--store", str(tmp / "pg.store")]
            rendezvous = local_rendezvous(tmp / "rdzv.store")
        else:
            rendezvous = nodes_rendezvous(tc.nodes, tc.rdzv_endpoint, rendezvous_id(ctx.cfg, ctx.iteration))
        if ctx.progress:
            args.append("--progress")
        cmd = launch_command(WORKER_MODULE, args, tc.processes, rendezvous)
        returncode = _run_torchrun(cmd, launch_env(tc.processes, tc.nodes))
        data = json.loads(result.read_text()) if result.is_file() else None
    if data is not None and "error" in data:
        raise SolrlError(data["error"])
    if returncode != 0 or data is None:
        others = (f"; each of the other {tc.nodes - 1} machine(s) must run `solrl update-node --run-dir "
                  f"{ctx.run.root}` and reach {tc.rdzv_endpoint}") if tc.nodes > 1 else ""
        raise RuntimeError(f"distributed update of iteration {ctx.iteration} failed (torchrun exit {returncode}, "
                           f"its output is above){others}; the stage is not complete")
    return data["summary"]


def _run_torchrun(cmd: list[str], env: dict[str, str]) -> int:
    """Run torchrun (its output streams through) and return its exit code. If this process is interrupted (Ctrl-C,
    a cancelled flow), torchrun gets SIGTERM, on which it stops its workers (SIGKILL would leave them running); if
    this process is killed, torchrun gets SIGTERM from the kernel (orphan_guard)."""
    proc = subprocess.Popen(guarded(cmd), env=env)
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
