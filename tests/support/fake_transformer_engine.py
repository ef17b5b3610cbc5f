"""Just enough of Transformer Engine, faked, to run the TE backend's wiring on a CPU (TELinear, te.autocast, the
two recipes)."""

import types
from contextlib import contextmanager
from dataclasses import dataclass

from torch import nn


@dataclass
class FakeNVFP4BlockScaling:
    disable_rht: bool = False
    disable_stochastic_rounding: bool = False
    disable_2d_quantization: bool = False


@dataclass
class FakeFloat8CurrentScaling:
    fp8_format: str = "HYBRID"


def make_fake_te():
    """Just enough of transformer_engine for TELinear: Linear, autocast, the two recipes."""
    state = {"active": None, "calls": []}

    class Linear(nn.Linear):
        def __init__(self, in_features, out_features, bias=True, params_dtype=None, device=None):
            super().__init__(in_features, out_features, bias=bias, dtype=params_dtype, device=device)

        def forward(self, x):
            assert state["active"] is not None, "te.Linear called outside te.autocast"
            assert x.dim() == 2 and x.shape[0] % 16 == 0
            state["calls"].append(state["active"])
            return super().forward(x)

    @contextmanager
    def autocast(enabled=True, recipe=None):
        state["active"] = recipe
        try:
            yield
        finally:
            state["active"] = None

    te = types.SimpleNamespace(Linear=Linear, autocast=autocast)
    recipe = types.SimpleNamespace(
        NVFP4BlockScaling=FakeNVFP4BlockScaling,
        Float8CurrentScaling=FakeFloat8CurrentScaling,
        Format=types.SimpleNamespace(E4M3="E4M3"),
    )
    return te, recipe, state
