"""Full fine-tuning's policy on one process (solrl_core/rl/full_policy.py): θ and θ_old start as W0 and train apart
from it (the cached W0 is never written), the soft update and the EMA as the LoRA policy's, and the state saved with
torch.distributed.checkpoint read back exactly, AdamW's moments included. Sharded over two ranks:
tests/e2e/test_full_policy_ranks.py."""

from __future__ import annotations

import torch

import pytest

from full_policy_case import BATCH, batch_loss, tiny_transformer
from solrl_core.rl.full_policy import FullPolicy
from solrl_core.rl.policy import DEFAULT, MASTER_DTYPE, OLD, EmaWeights

pytestmark = pytest.mark.slow  # trains whole (two-layer) models: `make test` runs it, `make test-fast` not


def _trained(policy: FullPolicy, steps: int = 2):
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    ema = EmaWeights(policy)
    for step in range(steps):
        optimizer.zero_grad()
        with policy.adapter(DEFAULT) as theta:
            batch_loss(theta, torch.arange(BATCH)).backward()
        optimizer.step()
        policy.soft_update_old(0.25)
        ema.update(policy, step)
    return optimizer, ema


def test_theta_and_theta_old_start_as_w0_and_train_apart_from_it():
    base = tiny_transformer()
    w0 = {k: v.clone() for k, v in base.state_dict().items()}
    policy = FullPolicy.build(base)
    for name in (DEFAULT, OLD):
        params = policy.named_adapter_parameters(name)
        assert params.keys() == dict(base.named_parameters()).keys()
        assert all(p.dtype == MASTER_DTYPE and torch.equal(p, w0[k]) for k, p in params.items())
    assert [p.requires_grad for p in policy.trainable_parameters()] == [True] * len(list(base.parameters()))
    assert not any(p.requires_grad for p in policy.named_adapter_parameters(OLD).values())
    with policy.reference() as module:
        assert module is base and policy.active is None
    assert policy.active == DEFAULT
    _trained(policy)
    assert all(torch.equal(v, w0[k]) for k, v in base.state_dict().items())  # W0 untouched
    moved = [k for k, p in policy.named_adapter_parameters(DEFAULT).items() if not torch.equal(p, w0[k])]
    assert len(moved) > len(list(base.parameters())) // 2


def test_the_soft_update_and_the_ema_follow_theta():
    policy = FullPolicy.build(tiny_transformer())
    theta, old = policy.named_adapter_parameters(DEFAULT), policy.named_adapter_parameters(OLD)
    with torch.no_grad():
        for p in theta.values():
            p.add_(1.0)
    before = {k: p.clone() for k, p in old.items()}
    policy.soft_update_old(0.25)
    for key, p in old.items():
        assert torch.equal(p, before[key].mul(0.25).add(theta[key], alpha=0.75))
    ema = EmaWeights(policy)
    assert all(torch.equal(ema.tensors[k], p) for k, p in theta.items())


def test_the_state_is_read_back_exactly_into_a_fresh_policy(tmp_path):
    policy = FullPolicy.build(tiny_transformer())
    optimizer, ema = _trained(policy)
    policy.save_state(tmp_path / "state", ema, optimizer)

    fresh = FullPolicy.build(tiny_transformer())
    fresh_optimizer = torch.optim.AdamW(fresh.trainable_parameters(), lr=1e-3)
    fresh_ema = EmaWeights(fresh)
    fresh.load_state(tmp_path / "state", fresh_ema, fresh_optimizer)
    for name in (DEFAULT, OLD):
        a, b = policy.named_adapter_parameters(name), fresh.named_adapter_parameters(name)
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(torch.equal(ema.tensors[k], fresh_ema.tensors[k]) for k in ema.tensors)
    for p, q in zip(policy.trainable_parameters(), fresh.trainable_parameters()):
        s, t = optimizer.state[p], fresh_optimizer.state[q]
        assert torch.equal(s["exp_avg"], t["exp_avg"]) and torch.equal(s["exp_avg_sq"], t["exp_avg_sq"])
        assert float(s["step"]) == float(t["step"]) == 2


def test_on_one_process_a_bfloat16_model_trains_fp32_weights_in_bfloat16_forwards():
    base = tiny_transformer().to(torch.bfloat16)
    policy = FullPolicy.build(base)
    assert all(p.dtype == MASTER_DTYPE for p in policy.trainable_parameters())
    with policy.adapter(DEFAULT) as theta:
        out = theta(hidden_states=torch.randn(1, 3, 32, 32), timestep=torch.tensor([500.0]),
                    encoder_hidden_states=torch.randn(1, 6, 64), pooled_projections=torch.randn(1, 64),
                    return_dict=False)[0]
    assert out.dtype == torch.bfloat16  # computed as the model's dtype, as FSDP2's param_dtype does sharded
    out.float().pow(2).mean().backward()
    assert all(p.grad is not None and p.grad.dtype == MASTER_DTYPE for p in policy.trainable_parameters()[:4])
