"""Host syncs of the explore copy on a (fake) GPU: none in a quantized layer's forward, and a number at build time
that does not grow with the number of layers. Under fake CUDA a CPU tensor meeting a device tensor raises, and
``HostToDevice`` records the copies from the host that fake CUDA does not count (``torch.tensor(..., device="cuda")``
makes a constant with a host-to-device copy, which waits on the stream): none may happen in the forward either."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.overrides import TorchFunctionMode

from solrl_core.models.quant import apply_backend, changed_keys, requantize_changed
from solrl_core.models.quant.backends import BackendChoice
from solrl_core.testing.fake_cuda import fake_cuda

EMULATED = ["nvfp4_emulated", "fp8_emulated", "bf16", BackendChoice("fp8", "test", "fp8", "torch._scaled_mm")]
IDS = ["nvfp4_emulated", "fp8_emulated", "bf16", "fp8_scaled_mm"]


def mlp(n_layers: int) -> nn.Sequential:
    """``n_layers`` quantizable Linears (64 wide, with and without bias) with GELUs between them."""
    layers: list[nn.Module] = []
    for i in range(n_layers):
        layers += [nn.Linear(64, 64, bias=i % 2 == 0), nn.GELU()]
    return nn.Sequential(*layers)


def _to_cuda(device) -> bool:
    return device is not None and torch.device(device).type == "cuda"


class HostToDevice(TorchFunctionMode):
    """Records, by function name, every tensor made on a CUDA device from Python data or from a real CPU tensor."""

    def __init__(self):
        super().__init__()
        self.copies: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.tensor, torch.as_tensor):
            from_host = _to_cuda(kwargs.get("device")) and not isinstance(args[0], FakeTensor)
        elif func in (torch.Tensor.to, torch.Tensor.cuda) and not isinstance(args[0], FakeTensor):
            device = "cuda" if func is torch.Tensor.cuda else torch._C._nn._parse_to(*args[1:], **kwargs)[0]
            from_host = _to_cuda(device)
        else:
            from_host = func is torch.Tensor.copy_ and not isinstance(args[1], FakeTensor) and isinstance(
                args[0], FakeTensor)
        if from_host:
            self.copies.append(func.__name__)
        return func(*args, **kwargs)


def syncs_of(backend, n_layers: int, n_forwards: int, act_fmt="nvfp4") -> tuple[int, int, list[str]]:
    """(syncs while building the explore copy, syncs and host-to-device copies during ``n_forwards`` forwards, where
    the syncs happened)."""
    with fake_cuda() as fc:
        model = mlp(n_layers).to("cuda")
        report = apply_backend(model, backend, [], 0, act_fmt=act_fmt)
        assert report.n_replaced == n_layers
        built = len(fc.syncs)
        x = torch.randn(2, 7, 64, device="cuda")
        with torch.no_grad(), HostToDevice() as h2d:
            for _ in range(n_forwards):
                y = model(x)
        assert y.shape == (2, 7, 64) and y.device.type == "cuda"
        return built, len(fc.syncs) - built + len(h2d.copies), fc.sync_sites() + h2d.copies


@pytest.mark.parametrize("backend", EMULATED, ids=IDS)
def test_no_host_sync_in_the_forward_and_one_at_build(backend):
    build_2, forward_1, _ = syncs_of(backend, n_layers=2, n_forwards=1)
    build_5, forward_3, sites = syncs_of(backend, n_layers=5, n_forwards=3)
    assert forward_1 == forward_3 == 0, sites  # neither a host sync nor a host-to-device copy
    # Building reads every layer's weight error back at once (which is also the weights' NaN check).
    assert build_2 == build_5 == 1, sites


def test_weight_only_nvfp4_forward_does_not_sync_either():
    assert syncs_of("nvfp4_emulated", n_layers=3, n_forwards=2, act_fmt=None)[1] == 0


@pytest.mark.parametrize("backend", EMULATED[:2], ids=IDS[:2])
def test_lora_sync_reads_back_once_whatever_the_number_of_keys_and_layers(backend):
    def sync_counts(n_changed: int) -> tuple[int, int]:
        with fake_cuda() as fc:
            model = mlp(4).to("cuda")
            previous = {k: v.clone() for k, v in model.state_dict().items()}
            apply_backend(model, backend, [], 0)
            current = {k: v * 1.5 for k, v in previous.items() if int(k.split(".")[0]) < 2 * n_changed}
            before = len(fc.syncs)
            changed_keys(current, previous)  # the comparisons (fake values: no key reads as changed here)
            compared = len(fc.syncs) - before
            assert requantize_changed(model, current, None) == list(current)  # None: every key is re-quantized
            return compared, len(fc.syncs) - before - compared

    assert sync_counts(1) == sync_counts(3) == (1, 1)
