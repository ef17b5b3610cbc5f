"""The trained policy under full fine-tuning (`train.adapter: full`, issue #47): θ and θ_old are whole copies of the
transformer's parameters in MASTER_DTYPE, the reference is the frozen base W0 itself.

On one process θ and θ_old are plain copies, their forwards under autocast to the model's dtype. Over a process group they are sharded with PyTorch's FSDP2
(`fully_shard` on every transformer block, then on the root, over a 1-D mesh of the group's ranks): each rank keeps
1/N of θ, of its gradients and AdamW moments, of θ_old and of the EMA; a block's parameters are all-gathered for its
forward in the model's dtype (`MixedPrecisionPolicy(param_dtype=...)`) and its gradients reduce-scattered in float32
(`reduce_dtype`). FSDP2 averages them over the ranks (gloo has no pre-multiplied sum for
`set_gradient_divide_factor`); the objective already weighs each rank's share of the pairs, as the LoRA update's
all-reduce sums them, so `sum_gradients` turns the mean back into the sum after the backward. The shards are copies: the cached W0 the reference
forward and the sampling stages use is never written.

It offers the interface the update stage uses of `LoraPolicy` (solrl_core/rl/policy.py): `adapter(name)` and
`reference()` yield the module a forward runs, `trainable_parameters`, `named_adapter_parameters`, `soft_update_old`;
`EmaWeights` works on it unchanged (its float32 clones of DTensor shards are shards too). Its state is saved and
loaded with torch.distributed.checkpoint (`save_state`, `load_state`) in safetensors files (`write_state`: no pickle,
which DCP's default format writes its metadata with) that a run of any number of ranks reads.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from solrl_core.models.blocks import transformer_blocks
from solrl_core.models.experts import TimestepExperts
from solrl_core.rl.policy import ADAPTERS, DEFAULT, MASTER_DTYPE, OLD


def shard(module: nn.Module, mesh, param_dtype: torch.dtype) -> nn.Module:
    """`module` sharded over `mesh` as FSDP2 does it for a diffusers transformer: every block its own unit, then the
    root; forward in `param_dtype`, gradients reduced in float32 and summed over the ranks. A transformer of experts
    (solrl_core/models/experts.py) runs every expert on every call, so every rank gathers and reduces the same
    blocks in the same order whichever experts its samples need."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    if isinstance(module, TimestepExperts):  # each rank runs every expert, whichever its rows need
        module.every_expert = True
    for block in transformer_blocks(module).values():
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(module, mesh=mesh, mp_policy=policy)
    return module


class FullPolicy:
    """θ, θ_old (whole transformers, trainable and frozen) and the reference W0. Build with `FullPolicy.build`."""

    def __init__(self, reference: nn.Module, theta: nn.Module, theta_old: nn.Module, ranks: int = 1,
                 compute_dtype: torch.dtype = MASTER_DTYPE):
        self.reference_module = reference
        self.ranks = ranks  # over which θ is sharded (1: not sharded)
        self.compute_dtype = compute_dtype  # θ's and θ_old's forwards on one process (sharded: FSDP2's param_dtype)
        self.modules = {DEFAULT: theta, OLD: theta_old}
        self._active: str | None = DEFAULT
        self._params = {name: dict(module.named_parameters()) for name, module in self.modules.items()}

    @classmethod
    def build(cls, transformer: nn.Module, mesh=None) -> FullPolicy:
        """θ = θ_old = `transformer`'s weights in MASTER_DTYPE (sharded over `mesh` when given); `transformer`
        itself stays frozen and unchanged as the reference."""
        param_dtype = next(transformer.parameters()).dtype
        transformer.requires_grad_(False)
        copies = []
        for _ in ADAPTERS:
            module = copy.deepcopy(transformer)  # one transformer at a time beside W0
            if mesh is not None:
                module = shard(module, mesh, param_dtype)  # shard first, then cast: never a whole fp32 copy
            copies.append(module.to(MASTER_DTYPE))
        theta, theta_old = copies
        theta.requires_grad_(True)
        theta_old.requires_grad_(False)
        return cls(transformer, theta, theta_old, ranks=1 if mesh is None else mesh.size(), compute_dtype=param_dtype)

    # ---- what the update uses ----------------------------------------------------------------------------------
    @property
    def transformer(self) -> nn.Module:
        """The module forward passes use now (θ, θ_old or the reference)."""
        return self.reference_module if self._active is None else self.modules[self._active]

    @property
    def active(self) -> str | None:
        return self._active

    def named_adapter_parameters(self, adapter_name: str = DEFAULT) -> dict[str, nn.Parameter]:
        """Parameter name -> parameter (a DTensor shard when sharded) of θ or θ_old, in module order."""
        return dict(self._params[_checked(adapter_name)])

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self._params[DEFAULT].values())

    def use(self, adapter_name: str) -> nn.Module:
        self._active = _checked(adapter_name)
        return self.transformer

    @contextmanager
    def adapter(self, adapter_name: str) -> Iterator[nn.Module]:
        """Forwards inside run θ or θ_old: in the model's dtype, as FSDP2 runs them sharded (on one process under
        autocast, the float32 master weights cast as each op reads them)."""
        previous, self._active = self._active, _checked(adapter_name)
        module = self.transformer
        try:
            if self.ranks == 1 and self.compute_dtype != MASTER_DTYPE:
                device = next(module.parameters()).device.type
                with torch.autocast(device, dtype=self.compute_dtype):
                    yield module
            else:
                yield module
        finally:
            self._active = previous

    @contextmanager
    def reference(self) -> Iterator[nn.Module]:
        previous, self._active = self._active, None
        try:
            yield self.transformer
        finally:
            self._active = previous

    @torch.no_grad()
    def sum_gradients(self) -> None:
        """After the backward: θ's gradients summed over the ranks, not averaged (module docstring); nothing to do
        on one process."""
        if self.ranks > 1:
            for p in self.trainable_parameters():
                if p.grad is not None:
                    p.grad.mul_(self.ranks)

    @torch.no_grad()
    def soft_update_old(self, eta: float) -> None:
        """θ_old ← η·θ_old + (1 − η)·θ, shard by shard."""
        for key, p_old in self._params[OLD].items():
            p_old.mul_(eta).add_(self._params[DEFAULT][key], alpha=1 - eta)

    def full_state_dict(self, adapter_name: str) -> dict[str, torch.Tensor]:
        """θ's or θ_old's whole parameters as CPU tensors (gathered from every rank when sharded: a collective)."""
        out = {}
        for key, p in self._params[_checked(adapter_name)].items():
            value = p.full_tensor() if hasattr(p, "full_tensor") else p
            out[key] = value.detach().to("cpu", copy=True).contiguous()
        return out

    # ---- state ------------------------------------------------------------------------------------------------
    def state(self, ema=None, optimizer=None) -> dict:
        """What `save_state` writes: θ, θ_old, the EMA and AdamW's state, keyed by parameter name (any number of
        ranks reads them back)."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        state = {name: dict(self._params[name]) for name in ADAPTERS}
        if ema is not None:
            state["ema"] = ema.tensors
        if optimizer is not None:  # its tensors; the parameter groups (lr, betas) are the run config's
            state["optimizer"] = {"state": get_optimizer_state_dict(self.modules[DEFAULT], optimizer)["state"]}
        return state

    def save_state(self, path: Path, ema=None, optimizer=None) -> None:
        """Every rank writes its shards into the folder `path` (torch.distributed.checkpoint); on one process the
        whole tensors."""
        write_state(self.state(ema, optimizer), path)

    def load_state(self, path: Path, ema=None, optimizer=None) -> None:
        """Read what `save_state` wrote, by any number of ranks, into this policy's shards (and the EMA's and the
        optimizer's, when given)."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

        state = self.state(ema, optimizer)
        read_state(state, path)
        if optimizer is not None:
            groups = get_optimizer_state_dict(self.modules[DEFAULT], optimizer)["param_groups"]
            set_optimizer_state_dict(self.modules[DEFAULT], optimizer,
                                     {"state": state["optimizer"]["state"], "param_groups": groups})


def write_state(state: dict, path: Path) -> None:
    """torch.distributed.checkpoint's save of `state` (tensors only) into the folder `path` as safetensors files
    (torch's Hugging Face storage: each rank its own shards with their offsets in the file's JSON header, no pickle
    anywhere), by every rank of the group, or by one process alone."""
    import torch.distributed.checkpoint as dcp

    distributed = _distributed()
    writer = dcp.HuggingFaceStorageWriter(str(path), save_distributed=distributed)
    if not distributed:  # its tensors staged on the host first, as DCP stages a rank's shards, then written in order
        state = _on_host(state)  # (no copy-ahead on device streams: nothing is left on the device to copy)
        writer.per_thread_copy_ahead = 0
    with _one_process_quiet():
        dcp.save(state, storage_writer=writer, no_dist=not distributed)


def read_state(state: dict, path: Path) -> None:
    """Fill `state`'s tensors in place from the folder `path`, whatever number of ranks wrote it."""
    import torch.distributed.checkpoint as dcp

    with _one_process_quiet():
        dcp.load(state, storage_reader=dcp.HuggingFaceStorageReader(str(path)), no_dist=not _distributed())


def _on_host(value):
    if isinstance(value, dict):
        return {key: _on_host(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_host(item) for item in value)
    return value.detach().cpu() if isinstance(value, torch.Tensor) else value


@contextmanager
def _one_process_quiet() -> Iterator[None]:
    """torch warns on every single-process save or load, even one asked for (no_dist): not the user's concern."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is (disabled|unavailable)")
        yield


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _checked(adapter_name: str) -> str:
    if adapter_name not in ADAPTERS:
        raise ValueError(f"unknown adapter {adapter_name!r}; expected one of {', '.join(ADAPTERS)}")
    return adapter_name
