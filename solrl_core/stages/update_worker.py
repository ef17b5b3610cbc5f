"""The update stage on several processes: `launch_update` (update_launch.py) starts torchrun, every rank runs this
module.

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
import logging
import os
from pathlib import Path

from solrl_core.errors import SolrlError
from solrl_core.stages.context import StageContext
from solrl_core.stages.update_launch import WORKER_MODULE


def main(argv: list[str] | None = None) -> int:
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)  # as the CLI: no import notices per rank

    from solrl_core.config.schema import load_yaml
    from solrl_core.config.loading import validate_config
    from solrl_core.rl.distributed import process_group
    from solrl_core.run.rundir import RunDir, write_json_atomic
    from solrl_core.stages.update import update_on_rank

    parser = argparse.ArgumentParser(prog=WORKER_MODULE, description="one rank of a distributed update (run by torchrun)")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--iteration", type=int, required=True)
    parser.add_argument("--config", required=True, help="the run's config as YAML (written by launch_update)")
    parser.add_argument("--result", required=True,
                        help="this machine's local rank 0 writes the summary (or the error) here")
    parser.add_argument("--store", help="file of the process group's store (absent at the start); none: env://")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args(argv)

    cfg = validate_config(load_yaml(Path(args.config).read_text()), source=args.config)
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
