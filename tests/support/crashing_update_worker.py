"""A rank of the update that crashes once it is in the process group (the worker of a machine whose update fails):
`launch_update` starts it in place of `solrl_core.stages.update_worker` in
tests/e2e/test_distributed_update_processes.py (with tests/support on PYTHONPATH)."""

from solrl_core.stages import update, update_worker


def _crash(ctx, sync):
    raise RuntimeError(f"rank {sync.rank} crashed (injected by the test)")


if __name__ == "__main__":
    update.update_on_rank = _crash  # update_worker.main imports it when it runs
    raise SystemExit(update_worker.main())
