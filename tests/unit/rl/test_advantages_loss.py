import math

import numpy as np
import pytest
import torch

from solrl_core.rl.advantages import group_advantages, optimality
from solrl_core.rl.nft_loss import forward_noise, nft_loss


def test_group_advantages_hand_example():
    rewards = np.array([1.0, 2.0, 3.0, 10.0, 10.0, 16.0])
    prompts = np.array([0, 0, 0, 1, 1, 1])
    # group means 2 and 12; overall mean 7, population variance (36+25+16+9+9+81)/6
    std = math.sqrt(176 / 6)
    expected = np.array([-1.0, 0.0, 1.0, -2.0, -2.0, 4.0]) / (std + 1e-4)
    np.testing.assert_allclose(group_advantages(rewards, prompts), expected, rtol=1e-12)


def test_group_advantages_interleaved_groups_and_clip():
    rewards = np.array([0.0, 5.0, 1.0, 5.0])
    prompts = np.array([7, 3, 7, 3])  # group 7: {0, 1}, group 3: {5, 5}
    std = np.sqrt(np.mean((rewards - rewards.mean()) ** 2))
    a = group_advantages(rewards, prompts, clip=5.0)
    np.testing.assert_allclose(a, np.array([-0.5, 0.0, 0.5, 0.0]) / (std + 1e-4))
    clipped = group_advantages(rewards, prompts, clip=0.1)
    np.testing.assert_allclose(clipped, [-0.1, 0.0, 0.1, 0.0])


def test_group_advantages_per_prompt_std():
    rewards = np.array([1.0, 2.0, 3.0, 10.0, 10.0, 16.0, 4.0, 4.0])
    prompts = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    a = group_advantages(rewards, prompts, std="prompt")
    for group in (0, 1):  # flow_grpo's PerPromptStatTracker(global_std=False): each group by its own std
        r = rewards[prompts == group]
        np.testing.assert_allclose(a[prompts == group], (r - r.mean()) / (r.std() + 1e-4), rtol=1e-12)
    assert (a[prompts == 2] == 0).all()  # a group of equal rewards gives no signal, not a division by 0
    assert not np.allclose(a, group_advantages(rewards, prompts))  # "global", the default, differs
    with pytest.raises(ValueError, match="std must be"):
        group_advantages(rewards, prompts, std="batch")


def test_optimality_values_and_bounds():
    adv = np.array([-12.0, -5.0, -2.5, 0.0, 2.5, 5.0, 7.0])
    np.testing.assert_allclose(optimality(adv), [0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0])
    np.testing.assert_allclose(optimality(np.array([1.0]), clip=2.0), [0.75])
    t = optimality(torch.tensor([-1.0, 1.0]))
    assert isinstance(t, torch.Tensor)
    torch.testing.assert_close(t, torch.tensor([0.4, 0.6]))


def test_forward_noise_per_sample():
    g = torch.Generator().manual_seed(0)
    x0, eps = torch.randn(3, 2, 4, 4, generator=g), torch.randn(3, 2, 4, 4, generator=g)
    t = torch.tensor([0.0, 0.3, 1.0])
    out = forward_noise(x0, t, eps)
    for i in range(3):
        torch.testing.assert_close(out[i], (1 - t[i]) * x0[i] + t[i] * eps[i])


def naive_nft(v, v_old, v_ref, x_t, x0, t, r, beta, adv_clip, kl_weight, detach_w=True):
    """Per-sample loop straight from docs/method.md; w is a python float (a constant) unless detach_w is False."""
    total = 0.0
    kl_sum = 0.0
    for i in range(v.shape[0]):
        v_pos = beta * v[i] + (1 - beta) * v_old[i]
        v_neg = (1 + beta) * v_old[i] - beta * v[i]
        x_pos = x_t[i] - t[i] * v_pos
        x_neg = x_t[i] - t[i] * v_neg
        if detach_w:
            w_pos = max(float((x_pos - x0[i]).detach().abs().mean()), 1e-5)
            w_neg = max(float((x_neg - x0[i]).detach().abs().mean()), 1e-5)
        else:
            w_pos = (x_pos - x0[i]).abs().mean().clamp(min=1e-5)
            w_neg = (x_neg - x0[i]).abs().mean().clamp(min=1e-5)
        l_pos = ((x_pos - x0[i]) ** 2).mean() / w_pos
        l_neg = ((x_neg - x0[i]) ** 2).mean() / w_neg
        total = total + (r[i] * l_pos + (1 - r[i]) * l_neg) / beta
        kl_sum = kl_sum + ((v[i] - v_ref[i]) ** 2).sum()
    return adv_clip * total / v.shape[0] + kl_weight * kl_sum / v.numel()


def _batch(seed):
    g = torch.Generator().manual_seed(seed)
    shape = (4, 3, 5, 5)
    x0 = torch.randn(shape, generator=g)
    eps = torch.randn(shape, generator=g)
    t = torch.tensor([0.1, 0.4, 0.7, 0.95])
    x_t = forward_noise(x0, t, eps)
    v_old = (eps - x0) + 0.3 * torch.randn(shape, generator=g)
    v_ref = (eps - x0) + 0.5 * torch.randn(shape, generator=g)
    v = v_old + 0.2 * torch.randn(shape, generator=g)
    r = torch.tensor([0.0, 0.3, 0.8, 1.0])
    return v, v_old, v_ref, x_t, x0, t, r


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_nft_loss_matches_naive_loop_including_grads(beta):
    v, v_old, v_ref, x_t, x0, t, r = _batch(1)
    kw = dict(adv_clip=5.0, kl_weight=0.05)
    v1 = v.clone().requires_grad_(True)
    loss, terms = nft_loss(v1, v_old, v_ref, x_t, x0, t, r, beta=beta, **kw)
    terms = {k: float(value) for k, value in terms.items()}  # 0-dim tensors: the caller reads them once per step
    loss.backward()
    v2 = v.clone().requires_grad_(True)
    ref = naive_nft(v2, v_old, v_ref, x_t, x0, t, r, beta, **kw)
    ref.backward()
    torch.testing.assert_close(loss.detach(), ref.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(v1.grad, v2.grad, rtol=1e-4, atol=1e-7)
    assert terms["loss"] == pytest.approx(float(ref.detach()), rel=1e-5)
    assert terms["kl"] == pytest.approx(float(((v - v_ref) ** 2).mean()), rel=1e-5)
    assert terms["loss"] == pytest.approx(terms["policy_loss"] + 0.05 * terms["kl"], rel=1e-6)

    # The test can tell a detached w from a differentiated one: their gradients differ.
    v3 = v.clone().requires_grad_(True)
    naive_nft(v3, v_old, v_ref, x_t, x0, t, r, beta, detach_w=False, **kw).backward()
    assert not torch.allclose(v3.grad, v1.grad, rtol=1e-3, atol=1e-6)


def test_nft_loss_error_terms_and_no_grad_into_old_or_ref():
    v, v_old, v_ref, x_t, x0, t, r = _batch(2)
    v = v.requires_grad_(True)
    v_old = v_old.clone().requires_grad_(True)
    v_ref = v_ref.clone().requires_grad_(True)
    loss, terms = nft_loss(v, v_old, v_ref, x_t, x0, t, r)
    terms = {k: float(value) for k, value in terms.items()}
    loss.backward()
    assert v_old.grad is None and v_ref.grad is None
    tb = t.view(-1, 1, 1, 1)
    pos_err = (x_t - tb * v.detach() - x0).abs().mean()  # beta = 1: v+ = v
    neg_err = (x_t - tb * (2 * v_old.detach() - v.detach()) - x0).abs().mean()
    assert terms["x0_pos_err"] == pytest.approx(float(pos_err), rel=1e-5)
    assert terms["x0_neg_err"] == pytest.approx(float(neg_err), rel=1e-5)


def test_nft_loss_floor_keeps_loss_finite_when_prediction_is_exact():
    v, v_old, v_ref, x_t, x0, t, r = _batch(3)
    v = ((x_t - x0) / t.view(-1, 1, 1, 1)).requires_grad_(True)  # x0+ == x0 exactly up to rounding
    loss, _ = nft_loss(v, v.detach(), v_ref, x_t, x0, t, torch.ones(4))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(v.grad).all()
