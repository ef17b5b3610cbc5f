"""One rank of a full fine-tuning step under FSDP2 (torchrun, gloo on the CPU), for tests/e2e/test_full_policy_ranks.py:
the one-layer embedded transformer, a fixed batch split over the ranks (each rank's loss weighted by its share), one
backward, AdamW, the soft update of θ_old and the EMA, then the gradients and weights gathered and the state saved
by every rank. `python -m torch.distributed.run --nproc-per-node N full_policy_ranks.py OUT [--checkpointed]
[--model embedded|flux1|wan22]`; with N = 1 the same step runs without sharding; --checkpointed recomputes the blocks'
activations in the backward; --model picks the case's transformer (tests/support/full_policy_case.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from full_policy_case import BATCH, batch_loss, tiny_transformer

from solrl_core.rl.full_policy import FullPolicy
from solrl_core.rl.policy import EmaWeights, OLD


def main(out: Path, checkpointed: bool = False, model: str = "embedded") -> None:
    torch.set_num_threads(1)
    sharded = int(__import__("os").environ.get("WORLD_SIZE", "1")) > 1
    if sharded:
        dist.init_process_group("gloo")
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        mesh, rank, world = None, 0, 1
    policy = FullPolicy.build(tiny_transformer(model), mesh)
    if checkpointed:  # model.gradient_checkpointing: diffusers recomputes each (sharded) block in the backward
        policy.transformer.enable_gradient_checkpointing()
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    ema = EmaWeights(policy)
    rows = torch.arange(BATCH).tensor_split(world)[rank]
    with policy.adapter("default") as theta:
        loss = batch_loss(theta, rows, model)
    loss.backward()
    policy.sum_gradients()
    grads = {k: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).clone()
             for k, p in policy.named_adapter_parameters().items()}
    optimizer.step()
    policy.soft_update_old(0.25)
    ema.update(policy, 0)
    weights = {f"theta.{k}": v for k, v in policy.full_state_dict("default").items()}
    weights.update({f"old.{k}": v for k, v in policy.full_state_dict(OLD).items()})
    policy.save_state(out / "state", ema, optimizer)
    if rank == 0:
        from safetensors.torch import save_file

        save_file({f"grad.{k}": v.contiguous() for k, v in grads.items()} | weights, str(out / "step.safetensors"))
    if sharded:
        dist.destroy_process_group()


if __name__ == "__main__":
    options = sys.argv[2:]
    main(Path(sys.argv[1]), checkpointed="--checkpointed" in options,
         model=options[options.index("--model") + 1] if "--model" in options else "embedded")
