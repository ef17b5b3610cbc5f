"""The update stage on several processes: `launch_update` starts torchrun, every rank runs this module.

    python -m torch.distributed.run --nproc-per-node N ... --module solrl_core.stages.update_worker \\
        --run-dir DIR --iteration I --config CONFIG.yaml --result RESULT.json --store STORE_FILE

Each rank runs `update_on_rank` (solrl_core/stages/update.py) on its shard of the (sample, time) pairs; rank 0
writes the checkpoint exactly as the one-process update does (same files, same atomic rename) and the stage
summary to RESULT.json, which the launching process returns as the stage's summary. An error the user can fix
(SolrlError) is passed back the same way and raised again in the launching process.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import tempfile
from pathlib import Path

import yaml

from solrl_core.config import dump_config
from solrl_core.errors import SolrlError
from solrl_core.rl.distributed import check_setup, launch_command, launch_env
from solrl_core.stages.context import StageContext

MODULE = "solrl_core.stages.update_worker"


def launch_update(ctx: StageContext) -> dict:
    """Run the update stage of `ctx` on `train.processes` local processes; return its summary."""
    tc = ctx.cfg.train
    check_setup(tc.dist_backend, ctx.cfg.model.device)
    with tempfile.TemporaryDirectory(prefix="solrl-update-") as tmp:
        tmp = Path(tmp)
        config = tmp / "config.yaml"
        config.write_text(dump_config(ctx.cfg))
        result = tmp / "result.json"
        args = ["--run-dir", str(ctx.run.root), "--iteration", str(ctx.iteration),
                "--config", str(config), "--result", str(result), "--store", str(tmp / "pg.store")]
        if ctx.progress:
            args.append("--progress")
        cmd = launch_command(MODULE, args, tc.processes, tmp / "rdzv.store")
        returncode = _run_torchrun(cmd, launch_env(tc.processes))
        data = json.loads(result.read_text()) if result.is_file() else None
    if data is not None and "error" in data:
        raise SolrlError(data["error"])
    if returncode != 0 or data is None:
        raise RuntimeError(f"distributed update of iteration {ctx.iteration} failed (torchrun exit {returncode}, "
                           "its output is above); the stage is not complete")
    return data["summary"]


def _run_torchrun(cmd: list[str], env: dict[str, str]) -> int:
    """Run torchrun (its output streams through) and return its exit code. If this process is interrupted (Ctrl-C,
    a cancelled flow), torchrun gets SIGTERM, on which it stops its workers; SIGKILL would leave them running."""
    proc = subprocess.Popen(cmd, env=env)
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
    parser.add_argument("--result", required=True, help="rank 0 writes the summary (or the error) here")
    parser.add_argument("--store", required=True, help="file of the process group's store (absent at the start)")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)

    cfg = validate_config(yaml.safe_load(Path(args.config).read_text()), source=args.config)
    result = Path(args.result)
    with process_group(cfg.train.dist_backend, args.store, cfg.model.device) as sync:
        ctx = StageContext(RunDir(args.run_dir), cfg, args.iteration, progress=args.progress and sync.is_writer)
        try:
            summary = update_on_rank(ctx, sync)
        except SolrlError as exc:  # every rank meets the same input error; one of them reports it
            if sync.is_writer:
                write_json_atomic(result, {"error": str(exc)})
            return 2
        if sync.is_writer:
            write_json_atomic(result, {"summary": summary, "world_size": sync.world_size})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
