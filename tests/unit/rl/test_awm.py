"""Advantage-weighted matching (rl/awm_loss.py, rl/objective_awm.py) against the reference formulas of
scxue/advantage_weighted_matching `scripts/train_sd3_awm.py`, written here again in numpy: the ghuber-weighted
log-likelihood, the clipped advantage-weighted loss with its two KL terms, the stratified times, and the objective's
pairs on a closed-form flow (on policy the ratio is exactly 1)."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from gaussian_flow import DIM, GaussianFlow
from solrl_core.config.schema import AWMSettings
from solrl_core.rl.awm_loss import awm_log_prob, awm_loss
from solrl_core.rl.objective_awm import AWM, stratified_time_indices
from solrl_core.rl.objective_base import TrainingData

SETTINGS = AWMSettings(times_per_sample=3, timestep_fraction=0.9, ghuber_power=0.25, adv_clip=5.0,
                       advantage_max=1.0, clip_range=0.05, kl_weight=1e-2, old_kl_weight=1.0, old_eta_rate=0.001,
                       old_eta_max=0.3)


def _np_log_prob(v, eps, x0, t, p):
    err = ((v - (eps - x0)) ** 2).reshape(len(v), -1).mean(1)
    return -((err + 1e-10) ** p - 1e-10 ** p) * t / p


def _np_loss(v, v_old, v_ref, eps, x0, t, adv, s):
    lp, lp_old = _np_log_prob(v, eps, x0, t, s.ghuber_power), _np_log_prob(v_old, eps, x0, t, s.ghuber_power)
    a = np.clip(adv, -s.adv_clip, s.adv_clip) / s.adv_clip * s.advantage_max
    ratio = np.exp(lp - lp_old)
    policy = np.maximum(-a * ratio, -a * np.clip(ratio, 1 - s.clip_range, 1 + s.clip_range)).mean()
    return policy + s.kl_weight * ((v - v_ref) ** 2).mean() + s.old_kl_weight * ((v - v_old) ** 2).mean(), ratio


def test_log_prob_and_loss_match_the_reference_formulas():
    rng = np.random.default_rng(0)
    n = 8
    x0, eps = rng.normal(size=(n, 2, 3, 3)), rng.normal(size=(n, 2, 3, 3))
    v_old = eps - x0 + 0.3 * rng.normal(size=x0.shape)
    v = v_old + 0.2 * rng.normal(size=x0.shape)  # far enough from θ_old that some ratios leave 1 ± 0.05
    v_ref = v + 0.1 * rng.normal(size=x0.shape)
    t = rng.uniform(0.1, 1.0, n)
    adv = rng.normal(scale=3.0, size=n)
    torch_ = {k: torch.tensor(a) for k, a in dict(v=v, v_old=v_old, v_ref=v_ref, eps=eps, x0=x0, t=t).items()}
    lp = awm_log_prob(torch_["v"], torch_["eps"], torch_["x0"], torch_["t"], 0.25)
    np.testing.assert_allclose(lp.numpy(), _np_log_prob(v, eps, x0, t, 0.25), rtol=1e-12)
    lp_old = awm_log_prob(torch_["v_old"], torch_["eps"], torch_["x0"], torch_["t"], 0.25)
    loss, terms = awm_loss(lp, lp_old, torch.tensor(adv), torch_["v"], torch_["v_old"], torch_["v_ref"],
                           adv_clip=5.0, advantage_max=1.0, clip_range=0.05, kl_weight=1e-2, old_kl_weight=1.0)
    expected, ratio = _np_loss(v, v_old, v_ref, eps, x0, t, adv, SETTINGS)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert 0 < float(terms["clip_fraction"]) < 1  # the clipped branch is exercised
    assert float(terms["clip_fraction"]) == pytest.approx(np.mean(np.abs(ratio - 1) > 0.05))


def test_the_loss_without_a_reference_needs_no_kl_weight():
    z = torch.zeros(2, 4)
    lp = torch.zeros(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="v_ref"):
        awm_loss(lp, lp, torch.ones(2), z, z, None, adv_clip=5, advantage_max=1, clip_range=1, kl_weight=1e-4,
                 old_kl_weight=1)
    _, terms = awm_loss(lp, lp, torch.ones(2), z, z, None, adv_clip=5, advantage_max=1, clip_range=1, kl_weight=0,
                        old_kl_weight=1)
    assert float(terms["kl"]) == 0.0


def test_stratified_times_follow_the_reference_strata():
    """dgx_awm's pickscore setting: 14 steps, fraction 0.9, 6 strata of [0, 12): [0, 2), [2, 4), ... [10, 12)."""
    gen = torch.Generator().manual_seed(5)
    idx = stratified_time_indices(14, 0.9, 6, 200, gen)
    u = torch.rand((200, 6), generator=torch.Generator().manual_seed(5)).numpy()
    bounds = np.linspace(0, 12, 7).astype(int)
    expected = bounds[:-1] + (u * np.diff(bounds)).astype(int)
    np.testing.assert_array_equal(idx.numpy(), expected)
    assert idx.shape == (200, 6) and set(np.unique(idx[:, 5].numpy())) == {10, 11}
    # more strata than steps: empty strata repeat their lower bound, never past the schedule
    short = stratified_time_indices(3, 1.0, 6, 50, gen)
    assert short.min() >= 0 and short.max() <= 2


def _flow_data():
    flow = GaussianFlow(shift=3.0)
    gen = torch.Generator().manual_seed(3)
    cond = {"mu": torch.randn(4, DIM, generator=gen), "s": 0.3 + 0.7 * torch.rand(4, DIM, generator=gen)}
    latents = cond["mu"] + cond["s"] * torch.randn(4, DIM, generator=gen)
    data = TrainingData(latents=latents, sigmas=[*flow.sigmas(6), 0.0], rewards=np.array([0.2, 0.5, 0.9, 0.4]),
                        prompt_index=np.array([0, 0, 1, 1]))
    return flow, cond, data


def test_the_objectives_pairs_and_loss_recomputed_by_hand_and_on_policy_ratio_one():
    flow, cond, data = _flow_data()
    objective = AWM(SETTINGS, None)
    assert objective.forwards == ("old", "reference", "default") and objective.trained_times(10) == 3
    assert objective.old_policy_eta(100) == pytest.approx(0.1) and objective.old_policy_eta(10_000) == 0.3
    prepared = objective.prepare(data)
    gens = (torch.Generator().manual_seed(1), torch.Generator().manual_seed(2))
    step = objective.step(data, prepared, gens, lambda n: (0, n))
    assert step.n_pairs == len(step) == 4 * 3
    calls = []

    def forward(adapter, x, t, rows):  # θ, θ_old and the reference are one model here: on policy
        calls.append(adapter)
        return flow.velocity(flow.transformer, x, t, {k: c[rows] for k, c in cond.items()})

    loss, terms = step.loss(0, len(step), forward)
    assert calls == ["old", "reference", "default"]
    assert float(terms["ratio_mean"]) == 1.0 and float(terms["kl"]) == 0.0 and float(terms["old_kl"]) == 0.0
    # by hand: the same pairs' times and noise, the advantages of the reference's stat tracker (global std)
    idx, tix = step.pairs.unbind(1)
    times = prepared["times"][tix].double().numpy()
    assert set(np.unique(tix.numpy())) <= set(range(6)) and tix.reshape(4, 3)[:, 0].max() < 2  # strata of [0, 5)
    r, pi = data.rewards, data.prompt_index
    adv = np.array([(r[i] - r[pi == pi[i]].mean()) / (r.std() + 1e-4) for i in range(4)])[idx.numpy()]
    x0 = data.latents[idx].double().numpy()
    x_t = (1 - times[:, None]) * x0 + times[:, None] * step.eps.double().numpy()
    v = flow.velocity(flow.transformer, torch.tensor(x_t), torch.tensor(times), {k: c[idx] for k, c in cond.items()})
    expected, _ = _np_loss(v.numpy(), v.numpy(), v.numpy(), step.eps.double().numpy(), x0, times, adv, SETTINGS)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert float(loss) == pytest.approx(-(np.clip(adv, -5, 5) / 5).mean(), rel=1e-5)  # ratio 1: −mean(A')


def test_the_gradient_is_the_advantage_weighted_log_likelihoods():
    """On policy the policy loss's gradient is −mean(A' ∇ log p): a better-than-average sample pulls v toward its
    own target ε − x0, a worse one pushes away (the sign that makes AWM a policy gradient)."""
    x0, eps = torch.zeros(2, 4, dtype=torch.float64), torch.ones(2, 4, dtype=torch.float64)
    v = torch.full((2, 4), 0.5, dtype=torch.float64, requires_grad=True)  # below the target 1 on both rows
    t = torch.tensor([0.5, 0.5], dtype=torch.float64)
    lp = awm_log_prob(v, eps, x0, t, 0.25)
    loss, _ = awm_loss(lp, lp.detach(), torch.tensor([2.0, -2.0]), v, v.detach(), None, adv_clip=5,
                       advantage_max=1, clip_range=1, kl_weight=0, old_kl_weight=0)
    loss.backward()
    assert (v.grad[0] < 0).all() and (v.grad[1] > 0).all()  # gradient descent raises row 0's v, lowers row 1's


def test_the_log_likelihood_and_loss_copy_nothing_to_the_device():
    """AWM's per-micro-batch formulas on a (faked) GPU: no host-to-device copy and no sync (a constant made on the
    host would be one copy per call, two per micro-batch)."""
    from solrl_core.testing.fake_cuda import fake_cuda

    with fake_cuda() as gpu:
        v, eps, x0 = (torch.randn(4, DIM, device="cuda") for _ in range(3))
        t = torch.rand(4, device="cuda")
        before = len(gpu.uploads)
        log_prob = awm_log_prob(v, eps, x0, t, 1.0)
        awm_loss(log_prob, awm_log_prob(v, eps, x0, t, 1.0), torch.randn(4, device="cuda", dtype=torch.float64), v,
                 v, v, adv_clip=5.0, advantage_max=1.0, clip_range=0.2, kl_weight=0.1, old_kl_weight=0.1)
        assert gpu.uploads[before:] == [] and gpu.syncs == []
