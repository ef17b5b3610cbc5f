"""Flow-GRPO's SDE step, log-probability and loss against an independent implementation of the reference formulas
(float64 numpy, the SDE written as drift + diffusion, scipy's normal log-density), and the SDE sampler: its noise
comes from the seed alone, its stored log-probabilities recompute exactly from its stored trajectory (the on-policy
ratio is 1), and at noise level 0 it is the Euler ODE sampler."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats

from gaussian_flow import DIM, GaussianFlow
from solrl_core.models.sampler import sample
from solrl_core.models.sde_sampler import sample_sde, step_noise
from solrl_core.errors import SolrlError
from solrl_core.models.sde_step import SDE_MIN_GAP, sde_std, sde_step, sde_window_problem
from solrl_core.rl.flow_grpo import grpo_loss


def reference_step(x, v, sigma, sigma_next, sigma_max, a, eps):
    """The SDE of Flow-GRPO written as dx = [v + s²/(2σ) (x + (1 - σ) v)] dt + s dW (its paper's form), one Euler-
    Maruyama step of dt = σ' - σ, in float64: (x', per-sample mean log-density, mean, s)."""
    x, v, eps = (np.asarray(a_, dtype=np.float64) for a_ in (x, v, eps))
    s = a * math.sqrt(sigma / (1 - (sigma_max if sigma == 1 else sigma)))
    dt = sigma_next - sigma
    drift = v + s ** 2 / (2 * sigma) * (x + (1 - sigma) * v)
    mean = x + drift * dt
    x_next = mean + s * math.sqrt(-dt) * eps
    logp = scipy_stats.norm.logpdf(x_next, loc=mean, scale=s * math.sqrt(-dt)).mean(axis=1)
    return x_next, logp, mean, s


@pytest.mark.parametrize("sigma, sigma_next", [(1.0, 0.9), (0.7, 0.55), (0.2, 0.0)])
def test_sde_step_matches_the_reference_formulas(sigma, sigma_next):
    gen = torch.Generator().manual_seed(0)
    x, v, eps = (torch.randn(4, 16, generator=gen) for _ in range(3))
    step = sde_step(x, v, sigma, sigma_next, sigma_max=0.9, noise_level=0.7, noise=eps)
    x_next, logp, mean, s = reference_step(x, v, sigma, sigma_next, 0.9, 0.7, eps)
    np.testing.assert_allclose(step.prev_sample.numpy(), x_next, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(step.mean.numpy(), mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(step.log_prob.numpy(), logp, rtol=1e-5, atol=1e-5)
    assert step.std.tolist() == pytest.approx([s] * 4)
    # the update's call: the log-probability of the stored x' is the sampler's
    again = sde_step(x, v, sigma, sigma_next, sigma_max=0.9, noise_level=0.7, prev_sample=step.prev_sample)
    assert torch.equal(again.log_prob, step.log_prob)
    with pytest.raises(ValueError, match="not both"):
        sde_step(x, v, sigma, sigma_next, 0.9, 0.7, noise=eps, prev_sample=step.prev_sample)


def test_noise_level_zero_is_the_euler_step_and_sigma_one_uses_the_second_sigma():
    x, v = torch.randn(2, 8), torch.randn(2, 8)
    step = sde_step(x, v, 0.6, 0.4, sigma_max=0.9, noise_level=0.0, noise=torch.randn(2, 8))
    torch.testing.assert_close(step.prev_sample, x + (0.4 - 0.6) * v)
    assert torch.isnan(step.log_prob).all()  # a point mass has no density
    assert sde_std(1.0, 0.9, 0.7) == pytest.approx(0.7 * math.sqrt(1.0 / 0.1))
    assert sde_std(0.5, 0.9, 0.7) == pytest.approx(0.7)


def test_a_first_sigma_just_below_one_takes_the_second_sigma_too():
    """Wan's UniPC flow schedule starts at 0.999999: there the reference's `σ == 1` test never fires and the first
    step's scale is a·1000. The stand-in is the schedule's second sigma for every σ above it, so the first step
    of such a schedule is as finite as at σ = 1."""
    assert sde_std(0.999999, 0.964, 0.7) == pytest.approx(0.7 * math.sqrt(0.999999 / 0.036))
    assert sde_std(0.999999, 0.964, 0.7) < 4  # 0.7 · sqrt(0.999999 / 1e-6) = 700 with the σ == 1 test
    x, v, eps = torch.randn(3, 8), torch.randn(3, 8), torch.randn(3, 8)
    wan, sd3 = (sde_step(x, v, s0, 0.923, 0.964, 0.7, noise=eps) for s0 in (0.999999, 1.0))
    torch.testing.assert_close(wan.std, sd3.std, rtol=1e-6, atol=0)
    torch.testing.assert_close(wan.prev_sample, sd3.prev_sample, rtol=1e-4, atol=1e-4)


def test_a_window_that_divides_by_about_zero_is_refused_before_the_first_step():
    near_one = [1.0, 1.0 - SDE_MIN_GAP / 2, 0.99, 0.5, 0.0]  # a second sigma within SDE_MIN_GAP of 1
    problem = sde_window_problem(near_one, (0, 4))
    assert problem and "step 0" in problem and "objective.flow_grpo.window_start" in problem
    assert "step 1" in sde_window_problem(near_one, (1, 3))
    assert sde_window_problem(near_one, (2, 4)) is None  # from step 2 on every step is finite
    assert sde_window_problem([1.0, 0.9, 0.5, 0.0], (0, 3)) is None
    flow = GaussianFlow()
    flow.sigmas = lambda steps: near_one[:-1]
    with pytest.raises(SolrlError, match="divides by"):
        sample_sde(flow, flow.transformer, _cond(2), [1, 2], 4, 0.7)
    assert sample_sde(flow, flow.transformer, _cond(2), [1, 2], 4, 0.7, window=(2, 4)).log_probs.shape == (2, 2)


def test_grpo_loss_matches_the_reference_and_its_gradient_at_ratio_one():
    gen = torch.Generator().manual_seed(1)
    n = 12
    logp_old = torch.randn(n, generator=gen)
    logp = (logp_old + 0.3 * torch.randn(n, generator=gen)).requires_grad_(True)
    adv = 4 * torch.randn(n, generator=gen)
    mean, mean_ref = torch.randn(n, 8, generator=gen), torch.randn(n, 8, generator=gen)
    std = torch.tensor(0.45)
    loss, terms = grpo_loss(logp, logp_old, adv, mean, mean_ref, std, clip_range=0.2, adv_clip=2.0, kl_weight=0.04)
    a = np.clip(adv.numpy().astype(np.float64), -2, 2)
    ratio = np.exp(logp.detach().numpy().astype(np.float64) - logp_old.numpy())
    policy = np.mean(np.maximum(-a * ratio, -a * np.clip(ratio, 0.8, 1.2)))
    kl = np.mean(((mean.numpy() - mean_ref.numpy()).astype(np.float64) ** 2).mean(axis=1) / (2 * 0.45 ** 2))
    assert float(terms["policy_loss"]) == pytest.approx(policy, rel=1e-5)
    assert float(terms["kl"]) == pytest.approx(kl, rel=1e-5)
    assert float(loss.detach()) == pytest.approx(policy + 0.04 * kl, rel=1e-5)
    assert float(terms["clip_fraction"]) == pytest.approx(np.mean(np.abs(ratio - 1) > 0.2))
    # on policy (log p = log p_old): the ratio is 1 and d loss / d log p = -A / n, clipped or not
    on = logp_old.clone().requires_grad_(True)
    loss_on, terms_on = grpo_loss(on, logp_old, adv, mean, None, std, clip_range=1e-4, adv_clip=2.0, kl_weight=0.0)
    loss_on.backward()
    assert float(terms_on["ratio_mean"]) == 1.0
    torch.testing.assert_close(on.grad, -torch.as_tensor(a, dtype=torch.float32) / n)
    with pytest.raises(ValueError, match="reference"):
        grpo_loss(on, logp_old, adv, mean, None, std, clip_range=0.2, adv_clip=2.0, kl_weight=0.1)


def _cond(batch: int):
    gen = torch.Generator().manual_seed(3)
    return {"mu": torch.randn(batch, DIM, generator=gen), "s": 0.3 + 0.7 * torch.rand(batch, DIM, generator=gen)}


def test_sde_sampler_trajectory_recomputes_its_log_probs_and_its_noise_is_the_seeds():
    flow, seeds, steps = GaussianFlow(shift=3.0), [11, 12, 13], 8
    cond = _cond(3)
    out = sample_sde(flow, flow.transformer, cond, seeds, steps, noise_level=0.7)
    assert out.latents.shape == (3, steps + 1, DIM) and out.log_probs.shape == (3, steps)
    torch.testing.assert_close(out.latents[:, 0], flow.initial_noise(seeds))
    torch.testing.assert_close(out.latents[:, -1], out.x0.float())
    sig = out.sigmas
    for i in range(steps):  # the update's recomputation from the stored (x_i, x_i+1): ratio exactly 1
        x = out.latents[:, i]
        v = flow.velocity(flow.transformer, x, torch.full((3,), sig[i]), cond)
        again = sde_step(x, v, sig[i], sig[i + 1], sig[1], 0.7, prev_sample=out.latents[:, i + 1])
        assert torch.equal(again.log_prob, out.log_probs[:, i])
        per_sample = sde_step(x, v, torch.full((3,), sig[i]), torch.full((3,), sig[i + 1]), sig[1], 0.7,
                              prev_sample=out.latents[:, i + 1])  # the update's form: a σ per row
        assert torch.equal(per_sample.log_prob, out.log_probs[:, i])
    # a seed's trajectory is its own: the same alone as in a batch
    alone = sample_sde(flow, flow.transformer, {k: c[1:2] for k, c in cond.items()}, seeds[1:2], steps, 0.7)
    torch.testing.assert_close(alone.latents[0], out.latents[1])
    assert not torch.equal(step_noise([11], 0, (DIM,)), step_noise([11], 1, (DIM,)))


def test_sde_sampler_window_and_noise_level_zero():
    flow, seeds = GaussianFlow(), [5, 6]
    cond = _cond(2)
    ode = sample(flow, flow.transformer, cond, flow.initial_noise(seeds), 6, sampler="euler").x0
    flat = sample_sde(flow, flow.transformer, cond, seeds, 6, noise_level=0.0)
    torch.testing.assert_close(flat.x0, ode, rtol=1e-5, atol=1e-6)
    windowed = sample_sde(flow, flow.transformer, cond, seeds, 6, noise_level=0.8, window=(2, 4))
    assert windowed.window == (2, 4) and windowed.latents.shape == (2, 3, DIM) and windowed.log_probs.shape == (2, 2)
    assert not torch.allclose(windowed.x0, ode)
    with pytest.raises(ValueError, match="window"):
        sample_sde(flow, flow.transformer, cond, seeds, 6, 0.8, window=(4, 7))
