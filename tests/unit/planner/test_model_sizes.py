"""Parameter counts of the full-size models on the meta device against their published sizes, and the memory
estimate's pieces against hand counts (torch's initialisation after the meta builds, in a fresh process:
tests/e2e/test_meta_device_init.py)."""

from __future__ import annotations

import pytest
import torch

from solrl_core.planner import memory

# published sizes (model cards / papers)
TRANSFORMERS = {"flux1": 12.0e9, "sd35l": 8.1e9, "sd35m": 2.5e9, "sana": 1.6e9, "qwenimage": 20e9}
ENCODERS = {"T5_XXL": 4.7e9, "CLIP_L_TEXT": 123e6, "CLIP_G_TEXT": 695e6, "GEMMA2_2B": 2.6e9, "CLIP_H14": 986e6,
            "QWEN25_VL_7B": 8.29e9,
            "UMT5_XXL": 5.68e9}  # Wan-AI's models_t5_umt5-xxl-enc-bf16.pth: 11.4 GB of bf16
# Wan 2.1's published dimensions (Wan-Video/Wan2.1 wan/configs/wan_t2v_{1_3B,14B}.py): width, feed-forward, blocks
WAN = {"wan": (1536, 8960, 30), "wan14b": (5120, 13824, 40)}


@pytest.mark.parametrize("model", list(TRANSFORMERS))
def test_full_size_transformers_have_their_published_sizes(model):
    assert memory.transformer_params(model) == pytest.approx(TRANSFORMERS[model], rel=0.03)


@pytest.mark.parametrize("entry", list(ENCODERS))
def test_text_encoders_and_reward_model_have_their_published_sizes(entry):
    assert memory.hf_params(entry) == pytest.approx(ENCODERS[entry], rel=0.03)


@pytest.mark.parametrize("model", list(WAN))
def test_wan_transformers_have_the_size_of_their_published_dimensions(model):
    # each block: self- and cross-attention (4 d x d projections each) and the feed-forward (d -> ffn -> d); besides,
    # the text embedder (4096 -> d -> d) and the time embedder's d -> d and d -> 6 d (the blocks' modulation); norms,
    # biases and the rest are under 1%
    d, ffn, blocks = WAN[model]
    hand = blocks * (8 * d * d + 2 * d * ffn) + (4096 * d + d * d) + 7 * d * d
    assert memory.transformer_params(model) == pytest.approx(hand, rel=0.01)


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
    g = est.gib
    beside = g["text_encoders"] + g["vae"] + g["reward"]
    # explore (the official copy: NVFP4 through Transformer Engine, lora_branch): W0, no layer of diffusers' SANA
    # replaced (its attention is 2240 wide = the min width, its feed-forward convolutional), θ and θ_old beside it
    assert est.explore_gib == {"quantized": 0.0, "merged": 0.0} and est.lora_branch
    assert est.inference_gib == pytest.approx(g["weights"] + est.lora_params * 8 / gib + beside)
    # regenerate: W0 once with θ and θ_old attached (fp32), no copy
    assert est.regenerate_gib == pytest.approx(g["weights"] + est.lora_params * 8 / gib + beside)
    # evaluation: W0 + the 20 blocks x 8 square 2240-wide targeted layers merged (bf16), θ, θ_old, EMA, θ's copy
    assert est.merged_gib * gib == 20 * 8 * 2240 * 2240 * 2
    assert est.evaluation_gib == pytest.approx(g["weights"] + est.merged_gib + est.lora_params * 16 / gib + beside)
    released = memory.memory_estimate("sana", micro_batch=4, text_encoders_resident=False)
    assert released.gib["text_encoders"] == 0
    assert released.gib["activations"] == pytest.approx(est.gib["activations"] / 4)
    assert "| SANA 1600M | 1.60 B | 22.9 M | Gemma-2-2B 2.61 B |" in memory.format_markdown([est])


H, F = 3072, 4 * 3072  # FLUX.1's width and feed-forward width
# the Linear layers FLUX.1's explore copy replaces (min width 1000; x_embedder, context_embedder, time_text_embed and
# norm_out kept), as (weights, biases) per block: double blocks: q, k, v, out and the context's add_q/k/v, to_add_out,
# both feed-forwards (H -> F -> H), both AdaLN modulations (H -> 6H); single blocks: modulation (H -> 3H), proj_mlp
# (H -> F), q, k, v, proj_out (H + F -> H); and the final proj_out (H -> 64)
FLUX_DOUBLE = (8 * H * H + 2 * 2 * H * F + 2 * 6 * H * H, 8 * H + 2 * (F + H) + 2 * 6 * H)
FLUX_SINGLE = (3 * H * H + H * F + 3 * H * H + (H + F) * H, 3 * H + F + 3 * H + H)
FLUX_REPLACED = tuple(19 * d + 38 * s + top for d, s, top in zip(FLUX_DOUBLE, FLUX_SINGLE, (H * 64, 64)))
FLUX_LAYERS = 19 * 14 + 38 * 6 + 1


@pytest.mark.parametrize("backend, per_layer_bytes", [
    (("nvfp4", "transformer_engine"), lambda w, b, n: 2 * (w + b)),  # te.Linear in the source dtype
    (("nvfp4_emulated", "emulated"), lambda w, b, n: 2 * (w + b)),  # dequantized, stored in bf16
    (("fp8", "torch._scaled_mm"), lambda w, b, n: w + 4 * n + 2 * b),  # E4M3 codes, a float32 scale per layer
    (("bf16", "torch"), lambda w, b, n: 2 * b),  # bf16 weights shared with W0, the bias copied
    (("fp32", "torch"), lambda w, b, n: 0),  # nothing replaced
])
def test_flux_explore_copy_against_a_hand_count(backend, per_layer_bytes):
    from solrl_core.planner.explore_copy import ExploreBackend, ExploreCopy

    weights, biases = FLUX_REPLACED
    merged = (19 * 4 + 38 * 3) * H * H * 2  # the official LoRA targets' W0 + ΔW in bf16
    for branch in (True, False):
        est = memory.memory_estimate("flux1", explore=ExploreCopy(ExploreBackend(*backend), lora_branch=branch))
        assert est.explore_gib["quantized"] * memory.GIB == per_layer_bytes(weights, biases, FLUX_LAYERS)
        # a merged target that is quantized is freed; every FLUX.1 target is replaced, except by fp32 (nothing is)
        assert est.explore_gib["merged"] * memory.GIB == (merged if not branch and backend[0] == "fp32" else 0)
        assert est.merged_gib * memory.GIB == merged  # the evaluation merges whatever the explore does
    kept = memory.memory_estimate("flux1", explore=ExploreCopy(ExploreBackend(*backend), min_width=H))
    assert kept.explore_gib["quantized"] < est.explore_gib["quantized"] or backend[0] == "fp32"  # the rule's min width


def test_the_update_measures_a_fp32_lora_on_a_bf16_base(monkeypatch):
    module = memory._training_module("flux1")
    dtypes = {("lora_" in n, p.dtype) for n, p in module.named_parameters()}
    assert dtypes == {(True, torch.float32), (False, torch.bfloat16)}
    spec = memory.get_model("flux1").spec
    fp32 = memory._activation_bytes("flux1", spec.image_tokens, spec.text_tokens, True)
    bf16_lora = memory.meta_transformer("flux1")
    memory._attach_meta_lora(bf16_lora, memory.lora_targets("flux1"), memory.LORA_RANK)
    monkeypatch.setattr(memory, "_training_module", lambda _key: bf16_lora.to(torch.bfloat16))
    bf16 = memory._activation_bytes.__wrapped__("flux1", spec.image_tokens, spec.text_tokens, True)
    # peft casts each targeted layer's input to the adapter's dtype and lora_A saves that fp32 copy: at least the
    # 19 x 4 double-block (1024 image tokens) and 38 x 3 single-block (1152 joint tokens) inputs, less what the
    # bf16 adapters' outputs saved (at most one H-wide bf16 tensor per layer)
    copies = (19 * 4 * 1024 + 38 * 3 * 1152) * H * 4
    assert fp32.no_checkpointing - bf16.no_checkpointing >= copies - (19 * 4 * 1024 + 38 * 3 * 1152) * H * 2
    assert fp32.block_inputs == bf16.block_inputs  # the blocks' inputs do not depend on the adapters' dtype


def test_memory_estimate_uses_the_presets_micro_batches():
    from repo_paths import ROOT
    from solrl_core.config.loading import load_config

    for model, spec in memory.SPECS.items():
        if spec.edits:
            continue  # no preset of an editing model: an edit preset needs an edit prompt set
        micro_batch = spec.micro_batch
        cfg = load_config(ROOT / "configs" / "presets" / f"{model}_sol_rl_pickscore.yaml")
        assert cfg.train.micro_batch == micro_batch, model
