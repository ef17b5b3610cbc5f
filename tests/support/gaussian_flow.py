"""A backbone whose flow has a closed-form velocity: samplers are checked against the exact solution."""

from __future__ import annotations

import numpy as np
import torch

from solrl_core.models.backbones.base import Backbone, BackboneDefaults

DIM = 6


class GaussianFlow(Backbone):
    """Data x0 ~ N(mu, diag(s^2)) per sample (mu, s from the conditioning). With x_t = (1 - t) x0 + t eps the exact
    velocity E[eps - x0 | x_t] is closed-form, and the ODE from x_1 = eps ends at x0 = mu + s * eps."""

    name = "gaussian"
    transformer = torch.nn.Identity()

    def __init__(self, shift: float = 1.0, distilled: bool = False):
        self.shift = shift
        self.defaults = BackboneDefaults([], [], 0, sampler="dpmpp_2m", distilled_guidance=distilled)
        self.calls: list[dict] = []

    @classmethod
    def load(cls, model):
        return cls()

    @property
    def latent_shape(self):
        return (DIM,)

    def encode_prompts(self, prompts):
        raise AssertionError("not used")

    def velocity(self, transformer, x_t, sigma, cond, guidance=1.0):
        self.calls.append({"batch": x_t.shape[0], "guidance": guidance})
        t = sigma.to(x_t.dtype)[:, None]
        mu, s = cond["mu"].to(x_t.dtype), cond["s"].to(x_t.dtype)
        var = (1 - t) ** 2 * s**2 + t**2
        centred = x_t - (1 - t) * mu
        eps_hat = t / var * centred
        x0_hat = mu + (1 - t) * s**2 / var * centred
        return eps_hat - x0_hat

    def decode(self, latents):
        return np.zeros((latents.shape[0], 1, 1, 3), np.uint8)

    def sigmas(self, steps):
        base = np.array([1.0 - i / steps for i in range(steps)])
        return (self.shift * base / (1 + (self.shift - 1) * base)).tolist()
