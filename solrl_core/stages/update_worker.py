"""The update stage on several processes: `launch_update` starts torchrun, every rank runs this module.

    python -m torch.distributed.run --nproc-per-node N [rendezvous options] --module solrl_core.stages.update_worker \\
        --run-dir DIR --iteration I --config CONFIG.yaml --result RESULT.json [--store STORE_FILE]

Each rank runs `update_on_rank` (solrl_core/stages/update.py) on its shard of the (sample, time) pairs; global rank 0
writes the checkpoint exactly as the one-process update does (same files, same atomic rename). Every rank ends with
the same stage summary (the loss terms and gradients are summed over ranks), so local rank 0 of each machine writes
it to that machine's RESULT.json, which its launching process returns. An error the user can fix (SolrlError) is
passed back the same way and raised again in the launching process.

With `train.nodes` > 1 every machine runs `launch_update` for itself: the one that runs the update stage, and each
other through `solrl update-node` (solrl_core/stages/update_node.py). Their torchruns meet at `train.rdzv_endpoint`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import tempfile
from pathlib import Path

import yaml

from solrl_core.config import RunConfig, dump_config
from solrl_core.errors import SolrlError
from solrl_core.orphan_guard import guarded
from solrl_core.rl.distributed import check_setup, launch_command, launch_env, local_rendezvous, nodes_rendezvous
from solrl_core.stages.context import StageContext

MODULE = "solrl_core.stages.update_worker"


def rendezvous_id(cfg: RunConfig, iteration: int) -> str:
    """The torchrun rendezvous id of one iteration's update: the same on every machine (from the run's config)."""
    return f"solrl-{cfg.name}-iter{iteration}"


def launch_update(ctx: StageContext) -> dict:
    """Run this machine's part of the update stage of `ctx` (`train.processes` local processes, and with
    `train.nodes` > 1 the other machines' torchruns joining); return the stage's summary."""
    tc = ctx.cfg.train
    check_setup(tc.dist_backend, ctx.cfg.model.device)
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
        cmd = launch_command(MODULE, args, tc.processes, rendezvous)
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


def main(argv: list[str] | None = None) -> int:
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)  # as the CLI: no import notices per rank

    from solrl_core.config import validate_config
    from solrl_core.rl.distributed import process_group
    from solrl_core.rundir import RunDir, write_json_atomic
    from solrl_core.stages.update import update_on_rank

    parser = argparse.ArgumentParser(prog=MODULE, description="one rank of a distributed update (run by torchrun)")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--iteration", type=int, required=True)
    parser.add_argument("--config", required=True, help="the run's config as YAML (written by launch_update)")
    parser.add_argument("--result", required=True,
                        help="this machine's local rank 0 writes the summary (or the error) here")
    parser.add_argument("--store", help="file of the process group's store (absent at the start); none: env://")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)

    cfg = validate_config(yaml.safe_load(Path(args.config).read_text()), source=args.config)
    result = Path(args.result)
    reporter = int(os.environ.get("LOCAL_RANK", 0)) == 0  # one rank per machine answers its launching process
    with process_group(cfg.train.dist_backend, args.store, cfg.model.device) as sync:
        ctx = StageContext(RunDir(args.run_dir), cfg, args.iteration, progress=args.progress and reporter)
        try:
            summary = update_on_rank(ctx, sync)
        except SolrlError as exc:  # every rank meets the same input error; one per machine reports it
            if reporter:
                write_json_atomic(result, {"error": str(exc)})
            return 2
        if reporter:
            write_json_atomic(result, {"summary": summary, "world_size": sync.world_size})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
