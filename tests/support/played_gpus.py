"""Machines with CUDA devices played on a CPU: torch says they are there (nothing that uses this touches one)."""

from __future__ import annotations

import pytest


def play_cuda_devices(monkeypatch, count: int) -> None:
    """torch.cuda reports `count` available devices for the rest of the test."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


@pytest.fixture
def four_gpus(monkeypatch):
    """A machine that says it has 4 CUDA devices, none hidden by CUDA_VISIBLE_DEVICES."""
    play_cuda_devices(monkeypatch, 4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
