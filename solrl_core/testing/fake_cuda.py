"""Run code that targets a CUDA device on a machine without one, with every tensor on the device faked.

Inside `fake_cuda()`, torch's `FakeTensorMode` stands in for the GPU: a tensor made on (or moved to) `cuda` is a fake
tensor that has a shape, a dtype and a device but no data, so a whole backbone "on the GPU" costs no memory and
every operation on it only propagates metadata. Ops reach the fake mode only when they name a CUDA device or take a
fake tensor (a `TorchFunctionMode` routes them), so CPU work stays real: seeded noise, schedulers, numpy, file I/O.

What it catches:

* **a CPU tensor meeting a CUDA one** (`FakeTensorDeviceMismatchError`, as a real GPU raises `Expected all tensors
  to be on the same device`), except the 0-dim CPU scalars CUDA accepts too;
* **floating inputs of different dtypes** in a matrix product or convolution (a bf16 weight given fp32 input), unless
  CUDA autocast is on (it casts them, as on a GPU);
* **host syncs**: `.item()`, `float()`, `bool()`, `.tolist()` of a device tensor, and reading its bytes (`.numpy()`
  after `.cpu()`) are counted in `FakeCuda.syncs` with the line that asked, instead of failing: a caller compares
  the count of two runs that differ only in their number of steps, and a sync inside a per-step loop shows as a
  difference. The value handed back is a placeholder (True, 1, 1.0, zeros), so the code goes on;
* **host-to-device copies** (a CPU tensor moved to the GPU, a tensor made from Python data on it) are counted in
  `FakeCuda.uploads` the same way: a constant made per step is a copy per step.

What it cannot do: compute (every value read back is a placeholder), run a real backward pass (autograd's engine asks
the driver for a device context: `backward()` of a fake tensor gives every leaf it reaches a zero gradient instead,
so the optimizer step after it still runs), or ops whose output shape depends on data (`nonzero`, boolean masks). Fused attention kernels
are chosen by asking the driver, so `scaled_dot_product_attention` runs its math kernel on fake inputs, and
`grid_sample` its native one (not cuDNN's).

`torch.cuda`'s queries are answered as a machine with `device_count` GPUs of `memory_gib` each would answer them.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode

__all__ = ["FakeCuda", "Sync", "fake_cuda", "is_fake"]

_SCALAR = torch.ops.aten._local_scalar_dense.default
# matrix products and convolutions: a GPU refuses floating inputs of different dtypes (a bf16 weight and an fp32
# input, say), which the fake kernels let through
_SAME_DTYPE = {F.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm,
               torch.bmm, torch.Tensor.bmm, torch.addmm, torch.baddbmm, F.conv1d, F.conv2d, F.conv3d}
_READS = {torch.Tensor.numpy, torch.Tensor.__array__}


@dataclass(frozen=True)
class Sync:
    """One host sync or copy: what asked (item, to cpu, numpy, to cuda), where solrl's own code asked for it (its
    innermost frame in solrl_core, flows or tasks, else the innermost one outside torch), and where it happened (the
    innermost frame outside torch: a library's own line, e.g. inside a diffusers model's forward)."""

    kind: str
    where: str
    origin: str = ""

    def __str__(self) -> str:
        return f"{self.kind} at {self.where}" + (f" (in {self.origin})" if self.origin != self.where else "")


_OWN = ("/solrl_core/", "/flows/", "/tasks/")


def _sites() -> tuple[str, str]:
    """(where, origin) of the op being run: see `Sync`. The stack is walked from the innermost frame out, and only as
    far as both are found (this runs for every upload: a model moved to the device uploads each of its weights;
    `traceback.extract_stack` would read every frame's source line)."""
    innermost = own = outside = None
    frame = sys._getframe(1)
    while frame is not None and (own is None or outside is None):
        filename = frame.f_code.co_filename
        if filename != __file__:
            site = (filename, frame.f_lineno)
            innermost = innermost or site
            if own is None and any(anchor in filename for anchor in _OWN):
                own = site
            if outside is None and "/torch/" not in filename:
                outside = site
        frame = frame.f_back
    where, origin = own or outside or innermost, outside or innermost
    return f"{_short(where[0])}:{where[1]}", f"{_short(origin[0])}:{origin[1]}"


def _short(path: str) -> str:
    for anchor in (*_OWN, "/site-packages/"):
        _, found, tail = path.rpartition(anchor)
        if found:
            return f"{anchor.strip('/')}/{tail}" if anchor in _OWN else tail
    return Path(path).name


def is_fake(t) -> bool:
    return isinstance(t, FakeTensor)


def _names_cuda(value) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cuda"
    if isinstance(value, str):
        return value == "cuda" or value.startswith("cuda:")
    return False


class _CountingFakeMode(FakeTensorMode):
    """FakeTensorMode that records a host sync and answers it with a placeholder instead of failing."""

    def __init__(self, owner: "FakeCuda"):
        super().__init__(allow_non_fake_inputs=True)
        self._owner = owner

    @property
    def avoid_device_init(self) -> bool:
        return True  # torch.cuda.is_available() is patched to True: never touch the (absent) driver

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _SCALAR:
            self._owner._record("item")
            dtype = args[0].dtype
            if dtype == torch.bool:
                return True
            return 1.0 if dtype.is_floating_point or dtype.is_complex else 1
        return super().__torch_dispatch__(func, types, args, kwargs)


def _placeholder_backward(output: torch.Tensor) -> None:
    """`output.backward()` for a fake graph: autograd's engine asks the driver for a device context, so instead every
    leaf that the graph reaches and that requires a gradient gets a zero gradient of its own shape, dtype and device
    (accumulated like a real one), which lets the optimizer step that follows run on fake tensors."""
    seen, todo = set(), [output.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)  # AccumulateGrad
        if leaf is not None and leaf.requires_grad:
            zero = torch.zeros_like(leaf)
            leaf.grad = zero if leaf.grad is None else leaf.grad + zero
        todo.extend(next_node for next_node, _ in node.next_functions)


def _to_host(func, args, kwargs) -> torch.dtype | None:
    """The dtype of the CPU tensor `func(*args, **kwargs)` makes from a device tensor, or None when it stays on the
    device (`.cpu()`, `.to("cpu")`, `.to(cpu_tensor)`, `.to("cpu", dtype)`)."""
    tensor = args[0]
    if func is torch.Tensor.cpu:
        return tensor.dtype
    if func is not torch.Tensor.to:
        return None
    kwargs = {k: v for k, v in kwargs.items() if k != "copy"}
    device, dtype, _, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
    if device is None or device.type != "cpu":
        return None
    return dtype or tensor.dtype


_MAKERS = {torch.tensor, torch.as_tensor}  # build a device tensor from host data


def _uploads(func, flat) -> bool:
    """Whether an op that names a CUDA device copies host data there: a real CPU tensor moved (`.to`, `.cuda`,
    `copy_`), or a tensor made from Python data (`torch.tensor(..., device="cuda")`); not one made on the device
    (`torch.zeros(..., device="cuda")`)."""
    if func in _MAKERS and not (flat and isinstance(flat[0], FakeTensor)):  # not a device tensor passed through
        return True
    return any(isinstance(a, torch.Tensor) and not isinstance(a, FakeTensor) and a.device.type == "cpu"
               and a.numel() > 0 for a in flat)


def _leaves(value, into: list) -> list:
    """The leaves of an op's arguments: tensors, devices and strings inside tuples, lists and dicts, in order (what
    `torch.utils._pytree.tree_flatten` gives for them, at a fraction of its cost: this runs for every op)."""
    if isinstance(value, (tuple, list)):
        for item in value:
            _leaves(item, into)
    elif isinstance(value, dict):
        for item in value.values():
            _leaves(item, into)
    else:
        into.append(value)
    return into


class _Router(TorchFunctionMode):
    """Sends into the fake mode only the ops that name a CUDA device or take a fake tensor."""

    def __init__(self, owner: "FakeCuda"):
        super().__init__()
        self._owner = owner

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # `Tensor.__deepcopy__(self, memo)`: the memo may hold fake tensors copied before; only `self` decides
        flat = list(args[:1]) if func is torch.Tensor.__deepcopy__ else _leaves(kwargs, _leaves(args, []))
        fake = any(isinstance(a, FakeTensor) for a in flat)
        if func in _READS and fake:
            return self._owner._read(func, args[0])
        if func is torch.Tensor.backward and fake:
            return _placeholder_backward(args[0])
        if func in _SAME_DTYPE and fake and not torch.is_autocast_enabled("cuda"):  # autocast casts them, as on a GPU
            dtypes = {t.dtype for t in flat if isinstance(t, torch.Tensor) and t.is_floating_point()}
            if len(dtypes) > 1:
                names = ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))
                raise RuntimeError(f"{getattr(func, '__name__', func)}: expected its inputs to have the same dtype, "
                                   f"got {names} (a CUDA device refuses the mix)")
        if fake and args and isinstance(args[0], FakeTensor):
            host = _to_host(func, args, kwargs)
            if host is not None:
                self._owner._record("to cpu")
                return torch.zeros(tuple(args[0].shape), dtype=host)
        if func is torch.equal and fake:  # reads a bool back
            self._owner._record("item")
            return True
        names_cuda = func is torch.Tensor.cuda or any(_names_cuda(a) for a in flat)
        if names_cuda and _uploads(func, flat):
            self._owner.uploads.append(Sync("to cuda", *_sites()))
        if fake or names_cuda:
            with self._owner.mode:
                if func is F.scaled_dot_product_attention:
                    from torch.nn.attention import SDPBackend, sdpa_kernel

                    with sdpa_kernel(SDPBackend.MATH):
                        return func(*args, **kwargs)
                if func is F.grid_sample:  # its cuDNN kernel has no fake implementation; the native one has
                    with torch.backends.cudnn.flags(enabled=False):
                        return func(*args, **kwargs)
                return func(*args, **kwargs)
        return func(*args, **kwargs)


@dataclass
class FakeCuda:
    """The state of one `fake_cuda()` block: the fake mode and the host syncs seen so far."""

    device_count: int = 1
    memory_gib: float = 80.0
    name: str = "NVIDIA H100 80GB HBM3 (faked)"
    capability: tuple[int, int] = (9, 0)
    syncs: list[Sync] = field(default_factory=list)
    uploads: list[Sync] = field(default_factory=list)  # host-to-device copies (where they were asked for)

    def __post_init__(self):
        self.mode = _CountingFakeMode(self)

    def _record(self, kind: str) -> None:
        self.syncs.append(Sync(kind, *_sites()))

    def _read(self, func, tensor: torch.Tensor):
        """Bytes of a fake tensor: counted as a sync; zeros of its shape and dtype."""
        self._record(func.__name__)
        dtype = torch.empty((), dtype=tensor.dtype).numpy().dtype if tensor.dtype != torch.bfloat16 else np.float32
        return np.zeros(tuple(tensor.shape), dtype=dtype)

    def sync_sites(self) -> list[str]:
        """Where the syncs happened, one entry per distinct site, in first-seen order."""
        return list(dict.fromkeys(str(s) for s in self.syncs))

    def _properties(self, device=None):
        return SimpleNamespace(name=self.name, total_memory=int(self.memory_gib * 2**30), major=self.capability[0],
                               minor=self.capability[1], multi_processor_count=132)

    def _thread_run(self):
        """`Thread.run` of threads started inside the block: torch function modes are per thread, so each new thread
        (a scorer overlapping sampling, say) enters the router too."""
        run = threading.Thread.run

        def routed_run(thread):
            with _Router(self):
                return run(thread)

        return routed_run

    def _patches(self) -> list:
        total = int(self.memory_gib * 2**30)
        cuda = torch.cuda
        return [
            mock.patch.object(cuda, "is_available", lambda: True),
            mock.patch.object(cuda, "device_count", lambda: self.device_count),
            mock.patch.object(cuda, "current_device", lambda: 0),
            mock.patch.object(cuda, "set_device", lambda device: None),
            mock.patch.object(cuda, "synchronize", lambda device=None: None),
            mock.patch.object(cuda, "empty_cache", lambda: None),
            mock.patch.object(cuda, "get_device_properties", self._properties),
            mock.patch.object(cuda, "get_device_name", lambda device=None: self.name),
            mock.patch.object(cuda, "get_device_capability", lambda device=None: self.capability),
            mock.patch.object(cuda, "is_bf16_supported", lambda *a, **k: True),
            mock.patch.object(cuda, "mem_get_info", lambda device=None: (total, total)),
            mock.patch.object(cuda, "memory_allocated", lambda device=None: 0),
            mock.patch.object(cuda, "max_memory_allocated", lambda device=None: 0),
            mock.patch.object(cuda, "reset_peak_memory_stats", lambda device=None: None),
            mock.patch.object(torch.nn.Module, "_apply", _apply_to_fake),
            mock.patch.object(threading.Thread, "run", self._thread_run()),
            # asks the driver for the current stream to see whether a CUDA graph is being captured: none is
            mock.patch.object(torch.optim.Optimizer, "_accelerator_graph_capture_health_check", lambda self: None),
        ]


_module_apply = torch.nn.Module._apply


def _apply_to_fake(module: torch.nn.Module, fn, recurse: bool = True):
    """`Module._apply` for modules holding fake tensors: assign what `fn` returns (torch's own swaps tensor bodies,
    which a fake tensor with weak references, as peft's layers keep, refuses)."""
    if not any(isinstance(t, FakeTensor) for t in (*module._parameters.values(), *module._buffers.values())):
        return _module_apply(module, fn, recurse)
    if recurse:
        for child in module.children():
            child._apply(fn)
    for key, param in module._parameters.items():
        if param is None:
            continue
        new = fn(param)
        if new is not param:
            module._parameters[key] = torch.nn.Parameter(new, requires_grad=param.requires_grad)
    for key, buf in module._buffers.items():
        if buf is not None:
            module._buffers[key] = fn(buf)
    return module


@contextlib.contextmanager
def fake_cuda(device_count: int = 1, memory_gib: float = 80.0) -> Iterator[FakeCuda]:
    """Inside, `cuda` devices exist and hold fake tensors (see the module's docstring); yields the block's state."""
    state = FakeCuda(device_count=device_count, memory_gib=memory_gib)
    with contextlib.ExitStack() as stack:
        for patch in state._patches():
            stack.enter_context(patch)
        # deep-copying a module (the explore copy's tree) reads each tensor's data pointer, which torch warns about
        # for fake ones: nothing reads through it here
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
        stack.enter_context(_Router(state))
        yield state
