"""Step-selective precision: a sampling run whose first and last steps run on the full-precision model and the others
on the low-precision explore copy (Tencent-Hunyuan/UniRL's Sol-RL `bf16_prefix_steps` / `bf16_suffix_steps`). The
early steps fix a sample's layout and the last ones its detail, which 4 bits may round away; the steps between carry
most of the FLOPs.

The samplers ask `model_at(transformer, step, steps)` for the model of each step, so a plain module samples as
before; a `StepSelective` answers with one of its two copies. Which one is a function of the step alone: a seed's
sample does not depend on its batch, and the loop never reads a value back.
"""

from __future__ import annotations

import torch


class StepSelective(torch.nn.Module):
    """Two models of one sampler: `full` on the first `first` and the last `last` steps of a run, `low` on the rest.
    The copies may share tensors (the explore copy's unquantized layers are W0's, and so are the full model's)."""

    def __init__(self, low: torch.nn.Module, full: torch.nn.Module, first: int, last: int):
        super().__init__()
        if first < 0 or last < 0:
            raise ValueError(f"full-precision steps must be >= 0, got first {first}, last {last}")
        self.low, self.full, self.first, self.last = low, full, first, last

    def at(self, step: int, steps: int) -> torch.nn.Module:
        return self.full if step < self.first or step >= steps - self.last else self.low

    def full_steps(self, steps: int) -> int:
        """How many of a `steps`-step run's steps run on `full`."""
        return sum(self.at(i, steps) is self.full for i in range(steps))


def model_at(transformer: torch.nn.Module, step: int, steps: int) -> torch.nn.Module:
    """The model that runs step `step` of a `steps`-step sampling run of `transformer`."""
    return transformer.at(step, steps) if isinstance(transformer, StepSelective) else transformer


def models_of(transformer: torch.nn.Module) -> tuple[torch.nn.Module, ...]:
    """Every model a sampling run of `transformer` may call (to reset their step caches)."""
    return (transformer.low, transformer.full) if isinstance(transformer, StepSelective) else (transformer,)
