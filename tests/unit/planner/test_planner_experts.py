"""The planner on a model of several experts (Wan2.2-T2V-A14B, `wan22`): every expert's weights in every stage, the LoRA
state of the trained experts alone, one expert's activations and FLOPs per forward; the fit check refuses its preset
where the two experts cannot fit."""

from __future__ import annotations

import pytest

from solrl_core.config.loading import load_config
from solrl_core.errors import SolrlError
from solrl_core.models.backbones.registry import backbone_spec
from solrl_core.planner import fits, flops, memory
from solrl_core.planner.gpus import get_gpu

A14B = "wan22"
SPEC = backbone_spec(A14B)
GIB = 2**30


@pytest.fixture(scope="module")
def both():
    return memory.memory_estimate(A14B)


@pytest.fixture(scope="module")
def one_expert():
    return memory.memory_estimate(A14B, trained_experts=("transformer_2",))


@pytest.fixture(scope="module")
def wan14b():
    """Wan2.1-T2V-14B at A14B's tokens and micro-batch: each A14B expert has its config (the same values)."""
    return memory.memory_estimate("wan14b", micro_batch=SPEC.micro_batch, image_tokens=SPEC.image_tokens)


def test_each_expert_is_wan21_14b_and_the_boundary_is_a14bs():
    assert SPEC.experts == SPEC.trained_experts == ("transformer", "transformer_2")
    assert memory.expert_counts(A14B) == (2, 2) and memory.expert_counts(A14B, ("transformer",)) == (2, 1)
    assert memory.expert_counts("wan14b") == (1, 1)
    assert memory.transformer_params(A14B) == memory.transformer_params("wan14b") == pytest.approx(14.29e9, rel=0.01)


def test_every_stage_holds_both_experts_weights_and_the_trained_experts_lora(both, one_expert, wan14b):
    assert both.experts == 2 and both.transformer_params == 2 * wan14b.transformer_params
    assert both.gib["weights"] == pytest.approx(2 * wan14b.gib["weights"])
    assert both.lora_params == 2 * wan14b.lora_params and both.gib["lora"] == pytest.approx(2 * wan14b.gib["lora"])
    assert one_expert.lora_params == wan14b.lora_params and one_expert.gib["weights"] == both.gib["weights"]
    # a forward runs one expert per sample: one expert's activations
    assert both.activation_per_pair == wan14b.activation_per_pair
    assert both.gib["activations"] == pytest.approx(wan14b.gib["activations"])
    # the explore copy quantizes every expert; the evaluation merges the trained experts' targeted layers
    assert both.explore_gib["quantized"] == pytest.approx(2 * wan14b.explore_gib["quantized"])
    assert both.merged_gib == pytest.approx(2 * wan14b.merged_gib) and one_expert.merged_gib == pytest.approx(
        wan14b.merged_gib)
    for stage, parts in both.stage_parts().items():
        assert parts["weights"] == pytest.approx(2 * wan14b.gib["weights"]), stage
    assert both.evaluation_gib - one_expert.evaluation_gib == pytest.approx(
        wan14b.merged_gib + wan14b.lora_params * memory.EVALUATION_ADAPTER_BYTES_PER_PARAM / GIB)
    assert "| Wan2.2-T2V-A14B | 2 × 14.29 B |" in memory.format_markdown([both])


def test_a_forward_costs_one_experts_flops():
    assert flops.get_model("wan2.2-t2v-a14b").backbone == A14B
    a14b, wan14b = flops.forward_flops(A14B), flops.forward_flops("wan14b", image_tokens=SPEC.image_tokens)
    assert a14b.total == pytest.approx(wan14b.total, rel=1e-9)


def test_the_fit_check_refuses_the_preset_where_two_experts_do_not_fit():
    """The preset (text encoders released) on 80 GB cards: the explore stage alone holds two experts' bf16 weights
    (53 GiB) and their quantized layers; on 141 GB (H200) every stage fits."""
    cfg = load_config("wan22_sol_rl_pickscore", ["model.device=cuda"])
    assert cfg.model.release_text_encoders
    stages = {s.stage: s.gib for s in fits.stage_memory(cfg)}
    assert set(stages) >= {"explore", "regenerate", "update", "evaluation"}
    assert max(stages.values()) > 80 - fits.MARGIN_GIB
    h100, h200 = (get_gpu(name).memory_gib * GIB for name in ("h100", "h200"))  # the planner's table: 80, 141
    with pytest.raises(SolrlError, match=r"Wan2.2-T2V-A14B's \w+ stage needs ~"):
        fits.check_memory_fits(cfg, device_memory_bytes=int(h100))
    fits.check_memory_fits(cfg, device_memory_bytes=int(h200))
    # training one expert: the LoRA state and the evaluation's merged layers of one
    one = load_config("wan22_sol_rl_pickscore", ["model.device=cuda", "train.experts=[transformer_2]"])
    ones = {s.stage: s.gib for s in fits.stage_memory(one)}
    assert ones["update"] < stages["update"] and ones["evaluation"] < stages["evaluation"]


@pytest.mark.parametrize("micro_batch", [1, 4])
def test_sharded_full_fine_tuning_prices_the_idle_experts_stand_in_rows(micro_batch):
    """FSDP2-sharded full fine-tuning runs every expert on every call of θ and θ_old (not of the reference): the
    update's forward-equivalents per trained pair grow by (experts - 1) / micro_batch x (those forwards + the
    backward); LoRA, one process or a one-expert model add none."""
    from solrl_core.planner.cost_model import BACKWARD_FACTOR, shapes_from_config
    from solrl_core.rl.objectives import objective_for

    base = ["train.adapter=full", "quant.lora_branch=false", f"train.micro_batch={micro_batch}"]
    sharded = load_config("wan22_sol_rl_pickscore", [*base, "train.processes=8"])
    forwards = objective_for(sharded).forwards
    expected = (len(SPEC.experts) - 1) / micro_batch * (sum(f != "reference" for f in forwards) + BACKWARD_FACTOR)
    assert shapes_from_config(sharded).standin_forwards == pytest.approx(expected) and expected > 0
    for unsharded in (load_config("wan22_sol_rl_pickscore", [*base, "train.processes=1"]),
                      load_config("wan22_sol_rl_pickscore", ["train.processes=8"]),  # LoRA: DDP, nothing sharded
                      load_config("wan_sol_rl_pickscore", [*base, "train.processes=8"])):  # one expert
        assert shapes_from_config(unsharded).standin_forwards == 0.0
