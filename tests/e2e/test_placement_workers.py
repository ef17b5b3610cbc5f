"""Placement in real worker processes: the local Dask cluster's workers for [cuda:0 .. cuda:3] each start with only
their GPU visible (on a faked 4-GPU machine; the rest of placement: tests/unit/stages/test_placement.py)."""

from __future__ import annotations

import os

import pytest

from played_gpus import four_gpus  # noqa: F401 - a fixture
from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.placement import resolve_devices


@pytest.mark.e2e
def test_worker_processes_start_pinned_to_their_gpu(four_gpus):
    """The local cluster's worker processes for [cuda:0 .. cuda:3] each start with only their GPU visible."""
    from distributed import Client

    from solrl.tasks.dask_shards import local_cluster

    devices = resolve_devices(load_config(TINY, ["model.device=cuda"]))
    with local_cluster(devices, preload=[]) as address, Client(address) as client:
        names = {addr: w["name"] for addr, w in client.scheduler_info(n_workers=-1)["workers"].items()}
        seen = client.run(lambda: (os.environ["CUDA_VISIBLE_DEVICES"], os.environ["SOLRL_DEVICE"], os.getpid()))
        resources = {names[a]: w["resources"] for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
    by_name = {names[addr]: value for addr, value in seen.items()}
    assert {name: v[:2] for name, v in by_name.items()} == {f"device-{k}": (str(k), f"cuda:{k}") for k in range(4)}
    assert len({v[2] for v in by_name.values()} | {os.getpid()}) == 5  # four processes besides this one
    assert all(r == {"device": 1} for r in resources.values())
