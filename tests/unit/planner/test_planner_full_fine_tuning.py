"""The memory model under full fine-tuning (`train.adapter: full`): the fp32 training state of every weight, sharded
over the update's ranks, the gathered blocks beside it, a whole θ_old copy in the sampling stages; and the fit check
naming the update's ranks as the remedy."""

from __future__ import annotations

import pytest

from repo_paths import ROOT
from solrl_core.config.loading import load_config
from solrl_core.planner.fits import fit_on_card, stage_memory
from solrl_core.planner.memory import FULL_BYTES_PER_PARAM, GIB, memory_estimate, transformer_blocks, plain_transformer

pytestmark = pytest.mark.slow  # builds full-size meta models


def test_the_full_training_state_is_every_weight_in_fp32_sharded_over_the_ranks():
    lora, one, eight = (memory_estimate("sd35l"), memory_estimate("sd35l", adapter="full"),
                        memory_estimate("sd35l", adapter="full", processes=8))
    params = one.transformer_params
    assert "lora" not in one.gib and one.gib["full_state"] == pytest.approx(params * FULL_BYTES_PER_PARAM / GIB)
    assert eight.gib["full_state"] == pytest.approx(one.gib["full_state"] / 8)
    assert one.gib["gathered"] == 0 < eight.gib["gathered"] < eight.gib["weights"] / 5
    block = max(sum(p.numel() for p in b.parameters()) for b in transformer_blocks(plain_transformer("sd35l")).values())
    assert eight.gib["gathered"] == pytest.approx(block * (2 * 2 + 4) / GIB)
    for name in ("weights", "text_encoders", "vae", "reward", "activations"):
        assert one.gib[name] == lora.gib[name]  # W0 stays whole on every rank
    for stage in ("explore", "regenerate", "evaluation", "audit"):  # W0 and a whole θ_old (or EMA) copy beside it
        assert one.stage_parts()[stage]["policy"] == pytest.approx(one.gib["weights"])


def test_the_fit_check_sends_a_full_fine_tuning_update_to_more_ranks():
    cfg = load_config("flux1_sol_rl_pickscore", ["train.adapter=full", "quant.lora_branch=false", "train.processes=1"])
    update = next(s for s in stage_memory(cfg) if s.stage == "update")
    assert update.parts["full_state"] > 200 and "full training state (per rank)" in update.describe()
    verdict = fit_on_card(cfg, 80.0)
    assert not verdict["fits"] and verdict["stage"] == "update"
    assert verdict["remedy"].startswith("set train.processes: 8 (the full training state sharded over 8 GPUs)")
