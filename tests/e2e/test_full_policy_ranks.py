"""Full fine-tuning's policy (the embedded transformer, a tiny FLUX.1, the tiny Wan2.2-T2V-A14B's two experts as one
module, each rank's rows on one expert alone) sharded with FSDP2 over 2 gloo processes
(torchrun; tests/support/full_policy_ranks.py) against the same step on one process: the gradients agree (to float32
rounding: the reduce-scatter sums in another order than one process; AdamW-moved weights are not compared, as no
tolerance holds for them), and the state the 2 ranks saved after AdamW, the soft update of θ_old and the EMA loads on
one process exactly as they held it; with activation checkpointing the sharded gradients are the same."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from cli_processes import free_port
from full_policy_case import MODELS, output_weights, tiny_transformer
from repo_paths import ROOT, SUPPORT
from solrl_core.rl.full_policy import FullPolicy
from solrl_core.rl.policy import DEFAULT, OLD, EmaWeights

pytestmark = pytest.mark.e2e


def _step(out, ranks: int, model: str, *options: str) -> dict[str, torch.Tensor]:
    out.mkdir()
    if ranks == 1:  # the same script in this process, without a process group
        from full_policy_ranks import main

        main(out, model=model)
        return load_file(out / "step.safetensors")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-addr",
            "127.0.0.1", "--master-port", str(free_port()), str(SUPPORT / "full_policy_ranks.py"), str(out), "--model", model, *options]
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return load_file(out / "step.safetensors")


@pytest.mark.parametrize("model", MODELS)
def test_two_sharded_ranks_take_the_step_of_one_process_and_one_process_reads_their_state(tmp_path, model):
    one, two = _step(tmp_path / "one", 1, model), _step(tmp_path / "two", 2, model)
    assert one.keys() == two.keys() and any(k.startswith("grad.") for k in one)
    for key in [k for k in one if k.startswith("grad.")]:  # not AdamW-moved weights: no tolerance holds for those
        assert torch.allclose(one[key], two[key], rtol=1e-4, atol=1e-7), key
    for key in output_weights(model):  # every expert of wan22's: its rows' gradients reach it on either side
        assert torch.count_nonzero(one[f"grad.{key}"]) > 0, key
    # activation checkpointing on the sharded blocks: the backward gathers each block again and recomputes it
    recomputed = _step(tmp_path / "two-checkpointed", 2, model, "--checkpointed")
    for key in [k for k in one if k.startswith("grad.")]:
        assert torch.allclose(recomputed[key], two[key], rtol=1e-5, atol=1e-8), key

    policy = FullPolicy.build(tiny_transformer(model))
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    ema = EmaWeights(policy)
    policy.load_state(tmp_path / "two" / "state", ema, optimizer)
    for prefix, name in (("theta", DEFAULT), ("old", OLD)):
        for key, p in policy.named_adapter_parameters(name).items():
            assert torch.equal(p, two[f"{prefix}.{key}"]), key  # exactly as the two ranks held it
    assert all(float(optimizer.state[p]["step"]) == 1 for p in policy.trainable_parameters())
