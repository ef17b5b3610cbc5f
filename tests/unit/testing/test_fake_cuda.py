"""The fake-CUDA tier itself (solrl_core/testing/fake_cuda.py): it must fail where a GPU fails and count what a GPU
would wait for, or the tests built on it prove nothing."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch._subclasses import fake_tensor

from solrl_core.testing.fake_cuda import fake_cuda, is_fake


def test_a_cpu_tensor_meeting_a_gpu_one_raises_as_on_a_gpu():
    with fake_cuda():
        layer = torch.nn.Linear(4, 3).to("cuda")
        assert is_fake(layer.weight) and layer.weight.device.type == "cuda"
        # named so from torch 2.13 (older: a RuntimeError); the tier needs 2.13 or newer without a GPU anyway
        with pytest.raises(getattr(fake_tensor, "FakeTensorDeviceMismatchError", RuntimeError)):
            layer(torch.randn(2, 4))
        assert layer(torch.randn(2, 4).to("cuda")).shape == (2, 3)
        assert (torch.ones(3, device="cuda") * torch.tensor(2.0)).device.type == "cuda"  # a 0-dim CPU scalar is fine


def test_cpu_work_stays_real():
    with fake_cuda():
        generator = torch.Generator().manual_seed(0)
        noise = torch.randn(3, generator=generator)
    assert not is_fake(noise) and torch.equal(noise, torch.randn(3, generator=torch.Generator().manual_seed(0)))


def test_mixed_dtypes_in_a_matrix_product_raise():
    with fake_cuda():
        weight = torch.zeros(4, 4, device="cuda", dtype=torch.bfloat16)
        with pytest.raises(RuntimeError, match="same dtype"):
            F.linear(torch.zeros(2, 4, device="cuda"), weight)
        assert F.linear(torch.zeros(2, 4, device="cuda", dtype=torch.bfloat16), weight).dtype == torch.bfloat16


def test_host_syncs_are_counted_where_they_happen_and_answered_with_placeholders():
    with fake_cuda() as gpu:
        x = torch.ones(2, 3, device="cuda")
        assert float(x.sum()) == 1.0 and bool((x > 0).all()) is True
        back = x.cpu()
        assert not is_fake(back) and torch.equal(back, torch.zeros(2, 3))  # the bytes: zeros of the shape and dtype
        assert np.array_equal(x.to("cpu", torch.float64).numpy(), np.zeros((2, 3)))
        before = len(gpu.syncs)
        assert len(x.tolist()) == 2 and len(gpu.syncs) > before  # a read too (element by element, as torch reads)
    assert [s.kind for s in gpu.syncs[:4]] == ["item", "item", "to cpu", "to cpu"]
    assert all(s.where.startswith("test_fake_cuda.py:") or "tests/unit/testing/test_fake_cuda.py:" in s.where for s in gpu.syncs)


def test_backward_gives_zero_gradients_and_the_optimizer_step_runs():
    with fake_cuda() as gpu:
        layer = torch.nn.Linear(4, 3).to("cuda")
        frozen = torch.nn.Parameter(torch.zeros(3, device="cuda"), requires_grad=False)
        loss = (layer(torch.ones(2, 4, device="cuda")) + frozen).square().mean()
        loss.backward()
        assert layer.weight.grad is not None and layer.weight.grad.device.type == "cuda" and frozen.grad is None
        torch.optim.AdamW(layer.parameters(), lr=1e-3).step()
    assert gpu.syncs == []


def test_threads_started_inside_see_the_gpu_too():
    seen = []
    with fake_cuda():
        x = torch.ones(2, device="cuda")
        thread = threading.Thread(target=lambda: seen.append((x * 2).device.type))
        thread.start()
        thread.join()
    assert seen == ["cuda"]


def test_cuda_queries_answer_as_the_faked_machine():
    with fake_cuda(device_count=4, memory_gib=141) as gpu:
        assert torch.cuda.is_available() and torch.cuda.device_count() == 4
        assert torch.cuda.get_device_properties(0).total_memory == 141 * 2**30
        assert gpu.device_count == 4
    assert not torch.cuda.is_available()  # restored (this machine has no GPU)


def test_host_to_device_copies_are_counted_and_made_on_device_tensors_are_not():
    with fake_cuda() as gpu:
        torch.zeros(3, device="cuda")  # made there: no copy
        torch.randn(3).to("cuda")
        torch.tensor([1.0, 2.0], device="cuda")
        torch.ones(2).cuda()
        assert torch.equal(torch.zeros(2, device="cuda"), torch.ones(2, device="cuda"))  # placeholder, counted
    assert [u.kind for u in gpu.uploads] == ["to cuda"] * 3
    assert [s.kind for s in gpu.syncs] == ["item"]
