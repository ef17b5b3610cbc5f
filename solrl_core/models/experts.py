"""A denoising transformer made of experts that take turns over the sampling schedule, as one module.

Wan2.2-T2V-A14B has two transformers: `transformer` runs the high-noise steps, `transformer_2` the low-noise ones,
switched at a boundary timestep (`boundary_ratio` x `num_train_timesteps`): WanPipeline calls `transformer` where
t >= the boundary and `transformer_2` below it. `TimestepExperts` holds the experts as its children, under the
pipeline's names, and routes each sample of a batch to the expert of its timestep. Everything that works on one
transformer's module tree works on it unchanged: the LoRA policy (peft's adapters, keyed by qualified names such as
`transformer_2.blocks.3.attn1.to_q`, so θ, θ_old and the EMA hold each trained expert's adapters under its own
prefix), the weight-sharing and merged copies, the explore copy's quantization (every Linear of every expert),
gradient checkpointing and the blocks (`solrl_core.models.blocks`: each expert's, prefixed), which full fine-tuning
shards with FSDP2 (then every call runs every expert: `every_expert`), and `model.compile` (the routing breaks the
graph; each expert's call is traced).

Routing reads nothing back from the device where the times are known on the host (`routed_at`, through the
backbone's `calls_at`): a sampling step's (the schedule's, every row at that time) and an update micro-batch's (the
objective step's `row_times`, one per row: the rows' indices are uploaded). Without them (a plug-in objective that
does not give its times) the rows are split by their timesteps on the device, which reads the split's sizes back.

Which experts are trained is a choice of LoRA targets: `expert_lora_targets` turns the targets (module-name
suffixes) into the qualified names of the matching modules inside the chosen experts, so peft adapts those alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager

import torch
from diffusers.loaders.peft import PeftAdapterMixin
from torch import nn


class TimestepExperts(nn.Module, PeftAdapterMixin):
    """Experts, from the highest-noise one to the lowest, each a transformer with the same call. Expert i runs the
    timesteps t with boundaries[i] <= t < boundaries[i - 1] (boundaries descending, one fewer than the experts; the
    first expert takes t >= boundaries[0]). Its output is the experts' outputs for their samples, in batch order."""

    _supports_gradient_checkpointing = True

    def __init__(self, experts: Sequence[tuple[str, nn.Module]], boundaries: Sequence[float]):
        super().__init__()
        if len(boundaries) != len(experts) - 1 or list(boundaries) != sorted(boundaries, reverse=True):
            raise ValueError(f"{len(experts)} experts need {len(experts) - 1} descending boundaries, got {boundaries}")
        self.expert_names = tuple(name for name, _ in experts)
        for name, module in experts:
            self.add_module(name, module)
        self.boundaries = tuple(float(b) for b in boundaries)
        # every call runs every expert (see `forward`): set where the experts are sharded with FSDP2, whose
        # all-gathers and reduce-scatters pair up across ranks only if every rank runs the same units in the same
        # order (the experts' blocks have the same shapes, so a rank running one expert while another runs the
        # other would pair their collectives silently: each rank's forward with the other expert's weights)
        self.every_expert = False
        # the timesteps of the coming calls' rows, known on the host (`routed_at`): one float, every row's (a
        # sampling step), or one per row (an update's micro-batch), so that the experts are chosen without reading
        # the rows' timesteps back from the device; None: read them
        self.host_timesteps: float | list[float] | None = None

    def experts(self) -> dict[str, nn.Module]:
        """Name -> expert, highest noise first."""
        return {name: getattr(self, name) for name in self.expert_names}

    @property
    def config(self):
        """The first expert's config (the experts share their layout: channels, patch size)."""
        return getattr(self, self.expert_names[0]).config

    @property
    def dtype(self) -> torch.dtype:
        return getattr(self, self.expert_names[0]).dtype

    def expert_index(self, timestep: torch.Tensor) -> torch.Tensor:
        """Per sample (the first value of each row of `timestep`), the index of the expert that runs it: how many
        boundaries lie above its timestep (t >= boundaries[0]: 0), compared in float64 as the pipeline compares
        its timestep with `boundary_ratio * num_train_timesteps`."""
        t = timestep.reshape(timestep.shape[0], -1)[:, 0].double()
        index = torch.zeros(t.shape, dtype=torch.long, device=t.device)
        for b in self.boundaries:
            index += (t < b).long()
        return index

    def expert_at(self, timestep: float) -> str:
        """The name of the expert that runs `timestep` (on the scheduler's scale; host arithmetic, as
        `expert_index`'s in float64)."""
        return self.expert_names[sum(float(timestep) < b for b in self.boundaries)]

    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor, **kwargs):
        """Each sample through the expert of its timestep; the keyword inputs that are batch-first tensors are split
        with it. Returns a 1-tuple (the transformers' `return_dict=False` form) of the outputs in batch order.
        With `every_expert` set (sharded, solrl_core/rl/full_policy.py), every expert runs, in order: one with no
        sample of the batch runs the first sample and its output is dropped (a zero gradient in the backward)."""
        batch = hidden_states.shape[0]
        kwargs = {**kwargs, "return_dict": False}
        experts_rows = self._rows_per_expert(timestep, batch)
        used = [i for i, rows in enumerate(experts_rows) if rows is not None]
        if len(used) == 1 and not self.every_expert:  # the whole batch in one expert (every sampling step): its
            return (getattr(self, self.expert_names[used[0]])(hidden_states=hidden_states, timestep=timestep,
                                                                 **kwargs)[0],)  # own call, no copies
        out, dropped = None, []
        for i in range(len(self.expert_names)) if self.every_expert else used:
            rows = experts_rows[i]
            idle = rows is None
            if idle:  # the transformers take no empty batch: the first sample stands in
                rows = torch.zeros(1, dtype=torch.long, device=hidden_states.device)
            part = {k: v.index_select(0, rows) if torch.is_tensor(v) and v.dim() and v.shape[0] == batch else v
                    for k, v in kwargs.items()}
            y = getattr(self, self.expert_names[i])(hidden_states=hidden_states.index_select(0, rows),
                                                     timestep=timestep.index_select(0, rows), **part)[0]
            if idle:
                dropped.append(y)
                continue
            if out is None:
                out = y.new_empty((batch, *y.shape[1:]))
            out = out.index_copy(0, rows, y)
        if dropped:
            out = _KeepInBackward.apply(out, *dropped)
        return (out,)

    def _rows_per_expert(self, timestep: torch.Tensor, batch: int) -> list[torch.Tensor | None]:
        """Per expert, the batch rows it runs (a long tensor on the input's device), None where it runs none: from
        the host timesteps when set (`routed_at`: no device read; the rows' indices uploaded), else from `timestep`
        on the device (its sizes read back: a host sync)."""
        device = timestep.device
        known = self.host_timesteps
        if known is None:
            index = self.expert_index(timestep)
            rows = [(index == i).nonzero().squeeze(1) for i in range(len(self.expert_names))]
            return [r if r.numel() else None for r in rows]
        if not isinstance(known, list):  # one time for every row
            chosen = self.expert_names.index(self.expert_at(known))
            return [torch.arange(batch, device=device) if i == chosen else None
                    for i in range(len(self.expert_names))]
        if len(known) != batch:
            raise ValueError(f"{len(known)} host timesteps for a batch of {batch}")
        names = [self.expert_at(t) for t in known]
        out = []
        for name in self.expert_names:
            rows = [r for r, chosen in enumerate(names) if chosen == name]
            out.append(torch.tensor(rows, dtype=torch.long).to(device) if rows else None)
        return out

    def enable_gradient_checkpointing(self) -> None:
        for expert in self.experts().values():
            expert.enable_gradient_checkpointing()

    def disable_gradient_checkpointing(self) -> None:
        for expert in self.experts().values():
            expert.disable_gradient_checkpointing()


class _KeepInBackward(torch.autograd.Function):
    """`out` unchanged, with the dropped outputs as inputs: the backward gives them zero gradients, so the experts
    that made them run their backward too (with FSDP2: their gradients' reduce-scatters, which the other ranks wait
    on) and contribute nothing."""

    @staticmethod
    def forward(ctx, out, *dropped):
        ctx.dropped = [(y.shape, y.dtype, y.device) for y in dropped]
        return out.clone()

    @staticmethod
    def backward(ctx, grad):
        return (grad, *(torch.zeros(shape, dtype=dtype, device=device) for shape, dtype, device in ctx.dropped))


def expert_lora_targets(transformer: nn.Module, targets: Sequence[str], experts: Sequence[str] | None
                        ) -> list[str]:
    """peft target_modules for LoRA on `targets` (module-name suffixes) within `experts` of a `TimestepExperts`:
    the qualified names of the matching modules inside them (None: every expert). A plain transformer: `targets`
    as they are (`experts` must then be None)."""
    if not isinstance(transformer, TimestepExperts):
        if experts:
            raise ValueError(f"train.experts {list(experts)}: the model has one transformer, no experts")
        return list(targets)
    chosen = tuple(experts) if experts else transformer.expert_names
    unknown = [e for e in chosen if e not in transformer.expert_names]
    if unknown or not chosen:
        raise ValueError(f"train.experts {list(chosen)}: the model's experts are {list(transformer.expert_names)}")
    return [name for name, _ in transformer.named_modules()
            if name.split(".", 1)[0] in chosen and any(name.endswith("." + t) for t in targets)]


@contextmanager
def routed_at(model: nn.Module, timesteps: float | list[float]):
    """Within the context, every `TimestepExperts` in `model` (a copy, a LoRA or compiled wrapper included) routes
    its calls' rows by `timesteps` (on the scheduler's scale), known on the host: one float, every row's (a sampling
    step), or one per row (an update's micro-batch); its routing then reads nothing back from the device."""
    experts = [m for m in model.modules() if isinstance(m, TimestepExperts)]
    for m in experts:
        m.host_timesteps = timesteps
    try:
        yield
    finally:
        for m in experts:
            m.host_timesteps = None
