"""The most bytes of tensors made inside a block of code alive at once, counted by a torch dispatch mode: every op's
new storages as they are made, each released when the last tensor viewing it is gone. Works on the meta device (a
full-size forward without memory: what the planner prices) as on a CPU or GPU."""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    """Inside, `now` is the bytes of the storages ops have made that some tensor still views; `peak` its maximum.
    Storages that existed before (weights, inputs) are not counted."""

    def __init__(self):
        super().__init__()
        self.now = self.peak = 0
        self._views: dict[int, int] = {}  # storage -> tensors viewing it that are alive
        self._bytes: dict[int, int] = {}
        self._before: set[int] = set()

    def ignore(self, *tensors: torch.Tensor) -> None:
        """Storages made before the block (inputs): never counted, whatever views them later."""
        self._before.update(t.untyped_storage()._cdata for t in tensors)

    def _release(self, key: int) -> None:
        self._views[key] -= 1
        if self._views[key] == 0:
            del self._views[key]
            self.now -= self._bytes.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in self._before or (key in inputs and key not in self._views):
                continue  # a view of something made before the block
            if key not in self._views:
                self._views[key] = 0
                self._bytes[key] = storage.nbytes()
                self.now += storage.nbytes()
                self.peak = max(self.peak, self.now)
            self._views[key] += 1
            weakref.finalize(t, self._release, key)
        return out


def peak_bytes(fn, *inputs: torch.Tensor) -> int:
    """The most bytes `fn(*inputs)` holds at once in tensors it made (its result included while it is made)."""
    with LiveBytes() as live:
        live.ignore(*inputs)
        result = fn(*inputs)
        del result
    return live.peak
