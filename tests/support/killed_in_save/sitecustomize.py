"""The machine dies in the middle of a sharded checkpoint's save: with this folder on PYTHONPATH and
SOLRL_TEST_KILLED_SAVE set (to the test's process group, which is spared), every Python process of a command (the
CLI, its device workers, torchrun's ranks) patches torch.distributed.checkpoint's Hugging Face writer when it imports
it, so that its `finish`, which rank 0 calls once every rank has written its shards and before the save returns (the
checkpoint's state.json, the stage's metrics and its commit), SIGKILLs the command's process group (rank 0's own, or
its parent's for a torchrun rank: the command starts in a session of its own, with everything it starts but
torchrun's ranks, which have sessions of their own) and then rank 0 itself, as a power cut or the OOM killer would.
The other ranks then find their peer gone. Used by tests/e2e/test_distributed_update_processes.py."""

import importlib.abc
import importlib.machinery
import os
import signal
import sys

WRITER_MODULE = "torch.distributed.checkpoint.hf_storage"


def _killed(self, *args, **kwargs):
    spared = int(os.environ["SOLRL_TEST_KILLED_SAVE"])  # the test's own process group
    for group in {os.getpgid(os.getppid()), os.getpgid(0)} - {spared}:  # a torchrun rank's parent's is the command's
        os.killpg(group, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


class _PatchWriter(importlib.abc.MetaPathFinder):
    """Finds nothing itself: once the writer's module is found, its loading ends with the patch."""

    def find_spec(self, name, path, target=None):
        if name != WRITER_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.HuggingFaceStorageWriter.finish = _killed

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("SOLRL_TEST_KILLED_SAVE"):
    sys.meta_path.insert(0, _PatchWriter())
