"""The objective registry (names, plug-ins), and Flow-GRPO as an objective on a stored SDE trajectory: its loss
recomputed independently from the trajectory, and on policy the ratio is exactly 1."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gaussian_flow import DIM, GaussianFlow
from solrl_core.config.schema import FlowGRPOSettings
from solrl_core.errors import ConfigError
from solrl_core.models.sde_sampler import sample_sde
from solrl_core.models.sde_step import sde_step
from solrl_core.rl.flow_grpo import grpo_loss
from solrl_core.rl.objective_awm import AWM
from solrl_core.rl.objective_base import Objective, TrainingData
from solrl_core.rl.objective_grpo import FlowGRPO, sde_window
from solrl_core.rl.objective_nft import DiffusionNFT
from solrl_core.rl.objectives import OBJECTIVES, objective_class

GRPO = FlowGRPOSettings(noise_level=0.7, clip_range=1e-4, adv_clip=5.0, kl_weight=0.04, window_start=0,
                        window_size=None, timestep_fraction=0.99)
TRAIN = SimpleNamespace(timestep_fraction=0.6, old_eta_rate=0.001, old_eta_max=0.5)


def test_registry_names_and_plugins():
    assert {name: objective_class(name) for name in OBJECTIVES} == {"diffusionnft": DiffusionNFT,
                                                                     "flow_grpo": FlowGRPO, "awm": AWM}
    assert objective_class("solrl_core.rl.objective_nft:DiffusionNFT") is DiffusionNFT
    with pytest.raises(ConfigError, match="objective.name 'grpo' is not an objective"):
        objective_class("grpo")
    with pytest.raises(ConfigError, match="objective.name"):
        objective_class("solrl_core.rl.objective_base:TrainingData")  # not an Objective
    assert DiffusionNFT.paradigm == AWM.paradigm == "decoupled" and FlowGRPO.paradigm == "coupled"
    assert FlowGRPO(GRPO, TRAIN).forwards == ("default", "reference")
    assert FlowGRPO(GRPO.model_copy(update={"kl_weight": 0.0}), TRAIN).forwards == ("default",)
    assert issubclass(FlowGRPO, Objective) and FlowGRPO(GRPO, TRAIN).old_policy_eta(7) == 0.0


def test_sde_window_lies_within_the_schedule_and_a_fast_window_trains_every_step():
    assert sde_window(10, 0, None) == (0, 10)
    assert sde_window(10, 2, 3) == (2, 5)
    for start, size in ((4, 3), (8, 2), (6, None)):  # past the schedule: refused, never cut
        with pytest.raises(ValueError, match="within the 6 steps"):
            sde_window(6, start, size)
    full = FlowGRPO(GRPO, TRAIN)
    assert full.trained_steps((0, 10)) == 9  # flow_grpo train_sd3.py: int(10 · 0.99), in order
    fast = FlowGRPO(GRPO.model_copy(update={"window_start": [0, 1, 2], "window_size": 3}), TRAIN)
    assert fast.trained_steps(fast.sde_window(10)) == 3  # train_sd3_fast.py: sde_window_size steps, all of them
    two = FlowGRPO(GRPO.model_copy(update={"window_start": 1, "window_size": 2}), TRAIN)
    assert two.trained_steps(two.sde_window(10)) == two.trained_times(10) == 2  # int(0.99 · 2) = 1 before


def _rollout(seeds, steps=6, noise_level=0.7):
    flow = GaussianFlow(shift=3.0)
    gen = torch.Generator().manual_seed(3)
    cond = {"mu": torch.randn(len(seeds), DIM, generator=gen), "s": 0.3 + 0.7 * torch.rand(len(seeds), DIM,
                                                                                             generator=gen)}
    out = sample_sde(flow, flow.transformer, cond, seeds, steps, noise_level)
    return flow, cond, out


def _data(out, rewards, prompt_index):
    return TrainingData(latents=out.x0.float(), sigmas=out.sigmas, rewards=np.asarray(rewards),
                        prompt_index=np.asarray(prompt_index), trajectory=out.latents, log_probs=out.log_probs,
                        window=out.window)


def test_grpo_loss_on_a_stored_trajectory_recomputed_independently_and_on_policy_ratio_one():
    seeds = [1, 2, 3, 4]
    flow, cond, out = _rollout(seeds)
    rewards, prompt_index = [0.2, 0.5, 0.9, 0.4], [0, 0, 1, 1]
    objective = FlowGRPO(GRPO, TRAIN)
    data = _data(out, rewards, prompt_index)
    prepared = objective.prepare(data)
    step = objective.step(data, prepared, (None, None), lambda n: (0, n))
    n_steps = int(6 * 0.99)  # flow_grpo trains the first int(steps * timestep_fraction) steps: 5 of 6
    assert step.n_pairs == len(step) == 4 * n_steps

    calls = []

    def forward(adapter, x, t, rows):  # the policy is the sampler's model itself: on policy
        calls.append(adapter)
        return flow.velocity(flow.transformer, x, t, {k: c[rows] for k, c in cond.items()})

    loss, terms = step.loss(0, len(step), forward)
    assert float(terms["ratio_mean"]) == 1.0 and float(terms["clip_fraction"]) == 0.0
    assert calls == ["default", "reference"]
    # by hand: every (sample, step) pair from the stored latents, the reference formulas of rl.flow_grpo
    r = np.asarray(rewards)
    adv = np.array([(r[i] - r[np.array(prompt_index) == prompt_index[i]].mean()) / (r.std() + 1e-4)
                    for i in range(4)])
    logps, olds, means, stds, advs = [], [], [], [], []
    for i in range(4):
        for j in range(n_steps):
            x, x_next = out.latents[i:i + 1, j], out.latents[i:i + 1, j + 1]
            v = flow.velocity(flow.transformer, x, torch.tensor([out.sigmas[j]]), {k: c[i:i + 1] for k, c in cond.items()})
            st = sde_step(x, v, out.sigmas[j], out.sigmas[j + 1], out.sigmas[1], 0.7, prev_sample=x_next)
            logps.append(st.log_prob), olds.append(out.log_probs[i:i + 1, j]), means.append(st.mean)
            stds.append(st.std), advs.append(adv[i])
    ref_loss, ref_terms = grpo_loss(torch.cat(logps), torch.cat(olds), torch.tensor(advs, dtype=torch.float32),
                                    torch.cat(means), torch.cat(means), torch.cat(stds), 1e-4, 5.0, 0.04)
    torch.testing.assert_close(terms["policy_loss"], ref_terms["policy_loss"])
    assert float(terms["kl"]) == 0.0  # the reference is the same model here
    torch.testing.assert_close(loss.detach(), ref_loss)
    assert float(terms["policy_loss"]) == pytest.approx(-adv.mean(), abs=1e-6)  # ratio 1: -mean(A)


def test_grpo_refuses_samples_without_a_trajectory():
    _, _, out = _rollout([1, 2])
    data = TrainingData(latents=out.x0, sigmas=out.sigmas, rewards=np.zeros(2), prompt_index=np.zeros(2))
    with pytest.raises(ValueError, match="trajectories"):
        FlowGRPO(GRPO, TRAIN).prepare(data)
