"""The sampling batches' activations in the memory check: the live-bytes count they come from, checked by hand;
each sampling stage's batch (doubled under classifier-free guidance); FLUX.1's explore batch against the count of
the review that asked for it (issue 44: ~3.6 GiB at the preset's batch of 32 in bf16)."""

from __future__ import annotations

import pytest
import torch

from repo_paths import ROOT
from solrl_core.config.loading import load_config
from solrl_core.planner.fits import sampling_batches, stage_memory
from solrl_core.planner.live_bytes import peak_bytes
from solrl_core.planner.memory import GIB, sampling_bytes
from solrl_core.testing.fake_cuda import fake_cuda

KIB4 = 4096


def _made_and_freed(x):
    a = x * 2  # 4 KiB
    b = a.view(32, 32)
    del a  # alive through its view
    c = b + 1  # 8 KiB
    del b, c
    d = torch.empty(4 * 1024)  # 16 KiB, the other two released
    return d.sum()


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_live_bytes_count_what_is_alive_at_once(device):
    x = torch.empty(1024, device=device)
    assert peak_bytes(_made_and_freed, x) == 4 * KIB4 + 4  # the 16 KiB and the sum's 4 bytes; x never counted


def _preset(name: str, *more: str):
    return load_config(ROOT / "configs" / "presets" / f"{name}.yaml", ["model.device=cuda", *more])


def test_each_sampling_stage_holds_its_batch():
    with fake_cuda():
        cfg = _preset("flux1_sol_rl_pickscore")
        stages = {s.stage: s.parts for s in stage_memory(cfg)}
    per_sample = sampling_bytes("flux1") / GIB
    assert stages["explore"]["sampling"] == pytest.approx(cfg.explore.batch_size * per_sample)
    assert stages["regenerate"]["sampling"] == pytest.approx(cfg.regenerate.batch_size * per_sample)
    assert stages["evaluation"]["sampling"] == pytest.approx(cfg.eval.batch_size * per_sample)
    assert "sampling" not in stages["update"]


def test_classifier_free_guidance_doubles_the_batch_distilled_guidance_does_not():
    plain = sampling_batches(_preset("sd35l_sol_rl_pickscore"), "sd35l")
    guided = sampling_batches(_preset("sd35l_sol_rl_pickscore", "guidance.rollout=4.5"), "sd35l")
    assert guided["explore"] == 2 * plain["explore"] and guided["evaluation"] == plain["evaluation"]
    flux = _preset("flux1_sol_rl_pickscore", "guidance.rollout=3.5")
    assert sampling_batches(flux, "flux1")["explore"] == flux.explore.batch_size  # FLUX.1-dev takes the scale


def test_flux1s_explore_batch_is_the_reviews_count():
    cfg = _preset("flux1_sol_rl_pickscore")
    assert cfg.explore.batch_size == 32
    assert 32 * sampling_bytes("flux1") / GIB == pytest.approx(3.6, rel=0.1)
