"""Parameter counts of the full-size models on the meta device against their published sizes, and the memory
estimate's pieces against hand counts."""

from __future__ import annotations

import pytest
import torch

from solrl_core.planner import memory

# published sizes (model cards / papers)
TRANSFORMERS = {"flux1": 12.0e9, "sd35l": 8.1e9, "sd35m": 2.5e9, "sana": 1.6e9, "qwenimage": 20e9}
ENCODERS = {"T5_XXL": 4.7e9, "CLIP_L_TEXT": 123e6, "CLIP_G_TEXT": 695e6, "GEMMA2_2B": 2.6e9, "CLIP_H14": 986e6,
            "QWEN25_VL_7B": 8.29e9}


@pytest.mark.parametrize("model", list(TRANSFORMERS))
def test_full_size_transformers_have_their_published_sizes(model):
    assert memory.transformer_params(model) == pytest.approx(TRANSFORMERS[model], rel=0.03)


@pytest.mark.parametrize("entry", list(ENCODERS))
def test_text_encoders_and_reward_model_have_their_published_sizes(entry):
    assert memory.hf_params(entry) == pytest.approx(ENCODERS[entry], rel=0.03)


def test_positional_table_buffers_and_tied_weights_count_once():
    sd35m = memory.meta_transformer("sd35m")
    params = sum(p.numel() for p in sd35m.parameters())
    assert memory.count_params(sd35m) - params == 384 * 384 * 1536  # pos_embed_max_size² × width, a buffer
    t5 = memory._transformers_meta(memory.HF_MODELS["T5_XXL"])
    assert memory.count_params(t5) == sum(p.numel() for p in t5.parameters())  # shared == embed_tokens, once


def test_lora_params_match_a_hand_count_and_peft():
    flux = memory.meta_transformer("flux1")
    # 19 double blocks: to_q, to_k, to_v, to_out.0 (3072 -> 3072); 38 single blocks: to_q, to_k, to_v only
    assert memory.lora_params(flux, memory.lora_targets("flux1")) == (19 * 4 + 38 * 3) * 32 * (3072 + 3072)
    sana = memory.meta_transformer("sana")
    counted = memory.lora_params(sana, memory.lora_targets("sana"))
    memory._attach_meta_lora(sana, memory.lora_targets("sana"), memory.LORA_RANK)
    assert counted == sum(p.numel() for n, p in sana.named_parameters() if "lora_" in n)
    assert counted == 20 * 8 * 32 * (2240 + 2240)  # 20 blocks x 8 square 2240-wide projections


def test_activation_measurement_of_sd35_medium():
    act = memory.activation_bytes("sd35m")
    # gradient checkpointing keeps each of the 24 joint blocks' inputs: image (4096 x 1536) and text ((77 + 128) x 1536)
    # tokens and the conditioning vector (1536), bf16
    assert act.block_inputs == 24 * ((4096 + 77 + 128) * 1536 + 1536) * 2
    assert 0 < act.largest_block < act.no_checkpointing / 10
    assert act.checkpointed < act.no_checkpointing / 4
    assert torch.nn.functional.scaled_dot_product_attention is not memory._flash_like_sdpa  # restored


def test_memory_estimate_adds_up():
    est = memory.memory_estimate("sana")
    gib = memory.GIB
    assert est.gib["weights"] == pytest.approx(est.transformer_params * 2 / gib)  # W0 once, bf16
    assert est.gib["lora"] == pytest.approx(est.lora_params * 24 / gib)
    assert est.gib["text_encoders"] == pytest.approx(memory.hf_params("GEMMA2_2B") * 2 / gib)
    assert est.gib["activations"] == pytest.approx(16 * est.activation_per_pair / gib)
    assert est.total_gib == pytest.approx(sum(est.gib.values()))
    g = est.gib  # explore: W0 + the inference copy, no LoRA state or training activations
    assert est.inference_gib == pytest.approx(2 * g["weights"] + g["text_encoders"] + g["vae"] + g["reward"])
    # regenerate: W0 once with θ and θ_old attached (fp32), no copy
    assert est.regenerate_gib == pytest.approx(
        g["weights"] + est.lora_params * 8 / gib + g["text_encoders"] + g["vae"] + g["reward"])
    released = memory.memory_estimate("sana", micro_batch=4, text_encoders_resident=False)
    assert released.gib["text_encoders"] == 0
    assert released.gib["activations"] == pytest.approx(est.gib["activations"] / 4)
    assert "| SANA 1600M | 1.60 B | 22.9 M | Gemma-2-2B 2.61 B |" in memory.format_markdown([est])


def test_memory_estimate_uses_the_presets_micro_batches():
    from conftest import ROOT
    from solrl_core.config import load_config

    for model, spec in memory.SPECS.items():
        micro_batch = spec.micro_batch
        cfg = load_config(ROOT / "configs" / "presets" / f"{model}_sol_rl_pickscore.yaml")
        assert cfg.train.micro_batch == micro_batch, model
