"""Building the full-size models on the meta device (the planner's memory estimate) leaves torch's initialisation
working, in a fresh process (the sizes and estimates: tests/unit/planner/test_model_sizes.py)."""

from __future__ import annotations

import pytest


H, F = 3072, 4 * 3072  # FLUX.1's width and feed-forward width
@pytest.mark.e2e
def test_building_on_the_meta_device_leaves_torch_init_working():
    """In a fresh process, where the planner is the first to import diffusers' models: torch.nn.init still
    initialises after the meta builds and a diffusers load (which restores the init functions it saw at import)."""
    import subprocess
    import sys

    code = """
import torch
from solrl_core.planner import memory
memory.memory_estimate("sana")
from diffusers.models.modeling_utils import no_init_weights
with no_init_weights():  # what every diffusers from_pretrained enters
    pass
weight = torch.nn.Linear(64, 64).weight
assert torch.nn.init.normal_.__module__ == "torch.nn.init", torch.nn.init.normal_
assert 0 < weight.abs().max() <= 64 ** -0.5, weight.abs().max()  # kaiming_uniform's bound: initialised
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
