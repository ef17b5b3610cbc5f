"""The memory preflight (solrl_core/planner/fits.py): a run whose stages cannot fit its GPUs' memory is refused in one
line, before any weights load, with the figures of the planner's memory model (solrl_core/planner/memory.py)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from unittest import mock

import pytest
import torch

from solrl_core.config.loading import load_config
from solrl_core.errors import SolrlError
from solrl_core.models.model_configs import config_dir
from solrl_core.planner import fits, memory
from solrl_core.planner.explore_copy import ExploreBackend, ExploreCopy
from solrl_core.testing.fake_cuda import fake_cuda
from repo_paths import ROOT

PRESETS = ROOT / "configs" / "presets"
GIB = 2**30
H100 = 80 * GIB  # fake_cuda's card, and the 80 GB class
H200 = 141 * 10**9  # 141 GB = 131.3 GiB


def preset(name: str, *overrides: str):
    return load_config(PRESETS / f"{name}.yaml", list(overrides))


# one sample's latent at the presets' resolutions (VAE 8× with 16 channels; SANA's DC-AE 32× with 32 channels;
# Qwen-Image's video VAE with its one frame): the update holds the 48 × 24 kept samples' latents in float32
PRESET_LATENT = {"flux1": 16 * 64 * 64, "sd35l": 16 * 128 * 128, "sana": 32 * 32 * 32, "qwenimage": 16 * 64 * 64}


def samples_gib(model: str) -> float:
    return 48 * 24 * PRESET_LATENT[model] * 4 / GIB


# explore.precision: auto on an H100: FP8, through transformer-engine (te.Linear keeps the bf16 weight) or, without
# it, torch._scaled_mm (1-byte E4M3 codes)
TE_FP8 = ExploreBackend("fp8", "transformer_engine")
SCALED_MM_FP8 = ExploreBackend("fp8", "torch._scaled_mm")


def reference(model: str, micro_batch: int, backend: ExploreBackend = TE_FP8, lora_branch: bool = True,
              **kw) -> memory.MemoryEstimate:
    """The memory model's own figures for a preset's backbone (what the check must have used), with its sol_rl
    preset's sampling batches."""
    kw.setdefault("sampling_batches", fits.sampling_batches(preset(f"{model}_sol_rl_pickscore"), model))
    return memory.memory_estimate(model, micro_batch, explore=ExploreCopy(backend, lora_branch), **kw)


def explore_gib(est: memory.MemoryEstimate) -> float:
    """W0 + the replaced layers + the merged targeted layers + θ and θ_old beside the quantized base (lora_branch)
    + text encoders, VAE and reward model."""
    g = est.gib
    return (g["weights"] + est.explore_gib["quantized"] + est.explore_gib["merged"] + est.lora_params * 8 / GIB
            + g["text_encoders"] + g["vae"] + g["reward"] + (est.sampling_gib or {}).get("explore", 0.0))


def test_the_qwenimage_preset_is_refused_on_an_80_gib_gpu_with_te_fp8():
    shipped = preset("qwenimage_sol_rl_pickscore")  # text encoders released: still over with TE's bf16 copies
    over = explore_gib(reference("qwenimage", shipped.train.micro_batch, text_encoders_resident=False))
    with fake_cuda(device_count=8, memory_gib=80), pytest.raises(SolrlError) as err:
        fits.check_memory_fits(shipped, explore_backend=TE_FP8)
    assert str(err.value).startswith(f"Qwen-Image's explore stage needs ~{over:.1f} GiB per GPU")
    cfg = preset("qwenimage_sol_rl_pickscore", "model.release_text_encoders=false")
    est = reference("qwenimage", cfg.train.micro_batch)
    need = explore_gib(est)
    released = need - est.gib["text_encoders"]
    with fake_cuda(device_count=8, memory_gib=80), pytest.raises(SolrlError) as err:
        fits.check_memory_fits(cfg, explore_backend=TE_FP8)  # the GPUs' memory asked of torch.cuda
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"Qwen-Image's explore stage needs ~{need:.1f} GiB per GPU")
    assert "layers in fp8 (transformer_engine)" in message  # te.Linear holds the bf16 weight: as large as W0's layer
    assert "cuda:0 (NVIDIA H100 80GB HBM3 (faked)) has 80.0 GiB" in message
    assert f"{need + fits.MARGIN_GIB - 80:.1f} GiB over" in message
    # the evaluation's policy shares W0, but its merged targeted layers (the 12 targets: 25 GiB) put it over too
    assert f"(also over: evaluation ~{est.evaluation_gib:.1f} GiB)" in message
    # releasing the text encoders is the only key for explore, and it is not enough on this card
    assert f"even with model.release_text_encoders: true it needs ~{released:.1f} GiB" in message
    assert f"at least {math.ceil(released + fits.MARGIN_GIB)} GiB" in message


def test_the_qwenimage_preset_fits_an_80_gib_gpu_with_fp8_through_torch_and_the_text_encoders_released(monkeypatch):
    """Without transformer-engine, auto is FP8 through torch._scaled_mm: the replaced layers hold 1 byte per weight.
    With the text encoders resident the evaluation (the merged copies of the 12 targeted layers) and the explore (its
    batch of 32 samples' activations) are over; released, which the refusal says, every stage fits."""
    import solrl_core.models.quant.backends as backends

    monkeypatch.setattr(backends, "te_support", lambda kind: (False, "transformer-engine is not installed"))
    assert preset("qwenimage_sol_rl_pickscore").model.release_text_encoders  # the preset releases them
    resident = preset("qwenimage_sol_rl_pickscore", "model.release_text_encoders=false")
    est = reference("qwenimage", resident.train.micro_batch, SCALED_MM_FP8)
    with fake_cuda(device_count=8, memory_gib=80), pytest.raises(SolrlError) as err:
        fits.check_memory_fits(resident)
    message = str(err.value)
    assert message.startswith(f"Qwen-Image's evaluation stage needs ~{est.evaluation_gib:.1f} GiB per GPU")
    assert message.count("also over") == 1 and f"(also over: explore ~{explore_gib(est):.1f} GiB)" in message
    released_eval = est.evaluation_gib - est.gib["text_encoders"]
    assert message.endswith(f"set model.release_text_encoders: true (~{released_eval:.1f} GiB)")
    cfg = preset("qwenimage_sol_rl_pickscore")
    with fake_cuda(device_count=8, memory_gib=80):
        stages = {s.stage: s for s in fits.check_memory_fits(cfg)}  # auto resolved on the (faked) Hopper GPU
    explore = stages["explore"]
    assert explore.precision == "fp8 (torch._scaled_mm)"
    released = reference("qwenimage", cfg.train.micro_batch, SCALED_MM_FP8, text_encoders_resident=False)
    assert explore.gib == pytest.approx(explore_gib(released))
    assert stages["evaluation"].gib == pytest.approx(released.evaluation_gib)
    assert max(s.gib for s in stages.values()) + fits.MARGIN_GIB <= 80
    assert 80 < explore_gib(reference("qwenimage", cfg.train.micro_batch, text_encoders_resident=False))  # TE: over


def test_an_h200_runs_the_qwenimage_preset_an_80_gib_gpu_cannot():
    cfg = preset("qwenimage_sol_rl_pickscore")
    with pytest.raises(SolrlError, match="explore"):
        fits.check_memory_fits(cfg, H100, TE_FP8)
    stages = fits.check_memory_fits(cfg, H200, TE_FP8)
    assert max(s.gib for s in stages) + fits.MARGIN_GIB <= H200 / GIB


def test_the_flux_preset_fits_an_80_gib_gpu_with_every_stage_priced():
    cfg = preset("flux1_sol_rl_pickscore")
    est = reference("flux1", cfg.train.micro_batch)
    stages = {s.stage: s.gib for s in fits.check_memory_fits(cfg, H100, TE_FP8)}
    assert list(stages) == ["explore", "regenerate", "update", "evaluation"]
    assert stages["explore"] == pytest.approx(explore_gib(est))
    assert stages["regenerate"] == pytest.approx(est.regenerate_gib)
    assert stages["update"] == pytest.approx(est.total_gib + samples_gib("flux1"))
    g = est.gib  # W0 + the EMA policy's merged targeted layers, θ, θ_old, the EMA and θ's copy (16 bytes per value)
    assert stages["evaluation"] == pytest.approx(g["weights"] + est.merged_gib + est.lora_params * 16 / GIB
                                                 + g["text_encoders"] + g["vae"] + g["reward"]
                                                 + cfg.eval.batch_size * memory.sampling_bytes("flux1") / GIB)
    assert max(stages.values()) + fits.MARGIN_GIB <= 80


def test_a_flow_grpo_update_holds_its_trajectories_on_every_rank():
    """SD3.5-M at 1024 px, the whole 10-step window: 1,152 samples × (final latent + 11 window latents) of
    16 × 128 × 128 float32, and 10 log-probabilities each, about 13.5 GiB more than DiffusionNFT's update."""
    nft = {s.stage: s.gib for s in fits.stage_memory(preset("sd35m_sol_rl_pickscore"), TE_FP8)}
    grpo = {s.stage: s.gib for s in fits.stage_memory(preset("flow_grpo/sd35m_sol_rl_pickscore"), TE_FP8)}
    latent = 16 * 128 * 128 * 4
    assert grpo["update"] - nft["update"] == pytest.approx(1152 * (11 * latent + 10 * 4) / GIB)
    assert grpo["explore"] == nft["explore"]  # the rollouts' own memory is not the update's
    fast = {s.stage: s.gib for s in fits.stage_memory(preset("flow_grpo/flux1_sol_rl_pickscore"), TE_FP8)}
    assert fast["update"] - {s.stage: s.gib for s in fits.stage_memory(preset("flux1_sol_rl_pickscore"), TE_FP8)}[
        "update"] == pytest.approx(1152 * (2 * 16 * 64 * 64 * 4 + 4) / GIB)  # a 1-step window: 2 latents, 1 log p


def test_the_configs_settings_reach_the_estimate():
    base = preset("flux1_sol_rl_pickscore")
    cfg = preset("flux1_sol_rl_pickscore", "train.lora_rank=64", "model.release_text_encoders=true",
                 "model.gradient_checkpointing=false", "train.micro_batch=2", "eval.every=0")
    est = reference("flux1", 2, text_encoders_resident=False, gradient_checkpointing=False, lora_rank=64)
    g = est.gib
    stages = {s.stage: s for s in fits.stage_memory(cfg, TE_FP8)}
    assert list(stages) == ["explore", "regenerate", "update"]  # no evaluation
    assert stages["update"].parts["activations"] == pytest.approx(2 * est.activation_per_pair_no_checkpointing / GIB)
    assert stages["update"].parts["lora"] == pytest.approx(
        2 * fits.stage_memory(base, TE_FP8)[2].parts["lora"])  # rank 64: twice the rank-32 state
    assert stages["update"].gib == pytest.approx(est.total_gib + samples_gib("flux1"))
    assert stages["regenerate"].parts["adapters"] == pytest.approx(est.lora_params * 8 / GIB)
    assert stages["explore"].gib == pytest.approx(explore_gib(est))  # no text encoders
    fp32 = {s.stage: s for s in fits.stage_memory(preset("flux1_sol_rl_pickscore", "model.dtype=float32"), TE_FP8)}
    assert fp32["explore"].parts["weights"] == pytest.approx(2 * g["weights"])  # 4 bytes per value
    assert fp32["explore"].parts["quantized"] == pytest.approx(2 * est.explore_gib["quantized"])  # te.Linear: fp32
    # the LoRA targets and quant.lora_branch: the merged layers of the targets the config names
    q_only = {s.stage: s for s in fits.stage_memory(preset("flux1_sol_rl_pickscore", "train.lora_targets=[to_q]",
                                                           "quant.lora_branch=false"), TE_FP8)}
    assert q_only["explore"].parts["merged"] == 0  # every to_q is quantized: its merged weight is freed
    assert q_only["evaluation"].parts["merged"] * GIB == (19 + 38) * 3072 * 3072 * 2
    assert q_only["update"].parts["lora"] == pytest.approx(
        fits.stage_memory(base, TE_FP8)[2].parts["lora"] * (19 + 38) / (19 * 4 + 38 * 3))


def test_the_resolution_and_text_length_change_the_measured_tokens():
    sd35l = memory.SPECS["sd35l"]
    cfg = preset("sd35l_sol_rl_pickscore", "model.resolution=512", "model.max_sequence_length=256")
    assert fits.config_tokens(cfg, "sd35l") == (sd35l.image_tokens // 4, 77 + 256)  # half the side, CLIP's 77 + T5
    assert fits.config_tokens(preset("sd35l_sol_rl_pickscore"), "sd35l") == (None, None)  # the official measurement
    sana = preset("sana_sol_rl_pickscore", "model.resolution=512")
    update = next(s for s in fits.stage_memory(sana) if s.stage == "update")
    per_pair = memory.activation_bytes("sana", memory.SPECS["sana"].image_tokens // 4).checkpointed
    assert update.parts["activations"] == pytest.approx(sana.train.micro_batch * per_pair / GIB)
    assert per_pair < memory.activation_bytes("sana").checkpointed


@pytest.mark.parametrize("name, overrides, memory_gib, stage, key", [
    # the update without gradient checkpointing: 12 pairs x 7.4 GiB
    ("flux1", ("model.gradient_checkpointing=false",), 80, "update", "set model.gradient_checkpointing: true"),
    # the explore of FLUX.1 (55.6 GiB) on a 56 GiB card: releasing the text encoders frees 9.1 GiB
    ("flux1", (), 56, "explore", "set model.release_text_encoders: true"),
    # the reference's merged copy on SD3.5-L (34.5 GiB: 3.3 GiB of merged attention layers, kept in high precision
    # by its min width, more than the LoRA branch's 31.5) on a 35 GiB card (the update's micro-batch and the
    # sampling batches made small)
    ("sd35l", ("quant.lora_branch=false", "train.micro_batch=2", "explore.batch_size=1", "regenerate.batch_size=1",
               "eval.batch_size=1"), 35, "explore", "set quant.lora_branch: true"),
])
def test_the_message_names_the_most_effective_key(name, overrides, memory_gib, stage, key):
    title = memory.SPECS[name].title
    with pytest.raises(SolrlError) as err:
        fits.check_memory_fits(preset(f"{name}_sol_rl_pickscore", *overrides), int(memory_gib * GIB), TE_FP8)
    assert f"{title}'s {stage} stage needs" in str(err.value) and key in str(err.value)


def test_a_micro_batch_too_large_is_refused_with_the_largest_that_fits():
    cfg = preset("flux1_sol_rl_pickscore", "train.micro_batch=128")
    limit = 80 - fits.MARGIN_GIB
    with pytest.raises(SolrlError, match="FLUX.1-dev's update stage needs") as err:
        fits.check_memory_fits(cfg, H100, TE_FP8)
    suggested = int(str(err.value).split("set train.micro_batch: ")[1].split(" ")[0])
    assert reference("flux1", suggested).total_gib <= limit < reference("flux1", suggested + 1).total_gib


def test_cpu_runs_are_not_checked():
    cfg = preset("qwenimage_sol_rl_pickscore", "model.device=cpu")
    assert fits.check_memory_fits(cfg, 1) is None


def test_the_check_loads_no_weights(monkeypatch):
    def no_load(*_a, **_k):
        raise AssertionError("the memory check loaded a model")

    import solrl_core.models.backbones.registry as registry

    monkeypatch.setattr(registry, "load_backbone", no_load)
    monkeypatch.setattr(torch.nn.Module, "load_state_dict", no_load)
    with pytest.raises(SolrlError, match="Qwen-Image's explore stage"):
        fits.check_memory_fits(preset("qwenimage_sol_rl_pickscore"), H100, TE_FP8)


def _diffusers_dir(tmp_path, config: dict):
    (tmp_path / "transformer").mkdir(parents=True)
    (tmp_path / "transformer" / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_only_backbones_with_a_full_size_model_are_checked(tmp_path):
    full = json.loads((config_dir() / memory.SPECS["flux1"].config_file).read_text())
    tiny = _diffusers_dir(tmp_path / "tiny", {**full, "num_layers": 1, "num_single_layers": 1,
                                              "attention_head_dim": 16, "num_attention_heads": 2})
    assert fits.memory_model_of(preset("flux1_sol_rl_pickscore", f"model.path={tiny}")) is None  # make-tiny's kind
    assert fits.check_memory_fits(preset("flux1_sol_rl_pickscore", f"model.path={tiny}"), 1) is None
    local = _diffusers_dir(tmp_path / "flux", full)
    assert fits.memory_model_of(preset("flux1_sol_rl_pickscore", f"model.path={local}")) == "flux1"
    with pytest.raises(SolrlError, match="FLUX.1-dev's explore stage"):  # a local full-size copy is checked
        fits.check_memory_fits(preset("flux1_sol_rl_pickscore", f"model.path={local}"), 40 * GIB, TE_FP8)
    # an SD3.5 directory is priced as the model its config is, whatever its name says
    medium = _diffusers_dir(tmp_path / "sd35", json.loads((config_dir() / "sd35-medium.transformer.json").read_text()))
    assert fits.memory_model_of(preset("sd35l_sol_rl_pickscore", f"model.path={medium}")) == "sd35m"
    # the embedded model (no full-size config) on a GPU
    embedded = load_config(ROOT / "configs" / "demo.yaml", ["model.device=cuda"])
    assert embedded.model.kind == "embedded" and fits.check_memory_fits(embedded, 1) is None


def test_the_smallest_gpu_the_run_uses_is_compared():
    cfg = preset("flux1_sol_rl_pickscore", "orchestration.devices=[cuda:0, cuda:1]", "train.processes=1")
    sizes = {0: 141 * GIB, 1: 40 * GIB, 2: 24 * GIB}  # cuda:2 is not the run's
    properties = lambda i: SimpleNamespace(name=f"GPU {i}", total_memory=sizes[i])  # noqa: E731
    with fake_cuda(device_count=3) as fc, mock.patch.object(torch.cuda, "get_device_properties", properties):
        assert fits.gpu_memory(cfg) == ("cuda:1 (GPU 1)", 40 * GIB)
        with pytest.raises(SolrlError, match=r"but cuda:1 \(GPU 1\) has 40.0 GiB"):
            fits.check_memory_fits(cfg)
        # the update's 3 ranks run on GPUs 0, 1 and 2
        update_on_three = preset("flux1_sol_rl_pickscore", "orchestration.devices=[cuda:0, cuda:1]",
                                 "train.processes=3")
        assert fits.gpu_memory(update_on_three) == ("cuda:2 (GPU 2)", 24 * GIB)
    assert fc.syncs == []


def test_reusing_identical_blocks_measures_what_the_whole_forward_does():
    spec = memory.get_model("flux1").spec  # two kinds of blocks; a single block returns two views of one storage
    reused = memory._activation_bytes("flux1", spec.image_tokens, spec.text_tokens, True)
    assert reused == memory._activation_bytes("flux1", spec.image_tokens, spec.text_tokens, False)
    assert not any("forward" in vars(b) for b in memory.transformer_blocks(memory._training_module("flux1")).values())


def test_the_preflight_refuses_before_the_model_loads(monkeypatch):
    from solrl_core import run_preflight
    import solrl_core.models.quant.backends as backends

    loaded = []
    for needs_files in ("preflight_rewards", "resolve_backend", "check_train_prompts", "check_edit_prompts"):  # prompts
        monkeypatch.setattr(run_preflight, needs_files, lambda *a, **k: None)
    monkeypatch.setattr(run_preflight, "load_backbone", loaded.append)
    monkeypatch.setattr(backends, "te_support", lambda kind: (kind == "fp8", ""))  # a Hopper GPU with TE: FP8 via TE
    with fake_cuda(device_count=1, memory_gib=80):  # one GPU: the preflight loads the model itself
        with pytest.raises(SolrlError, match="Qwen-Image's explore stage"):
            run_preflight.preflight(preset("qwenimage_sol_rl_pickscore", "train.processes=1"))
        assert loaded == []
        run_preflight.preflight(preset("flux1_sol_rl_pickscore", "train.processes=1"))
    assert [cfg.model.kind for cfg in loaded] == ["flux1"]


def test_the_presets_micro_batches_are_what_the_check_prices():
    for model in ("flux1", "sd35l", "sana", "qwenimage"):
        cfg = preset(f"{model}_sol_rl_pickscore")
        update = next(s for s in fits.stage_memory(cfg, TE_FP8) if s.stage == "update")
        resident = not cfg.model.release_text_encoders
        assert update.gib == pytest.approx(
            reference(model, cfg.train.micro_batch, text_encoders_resident=resident).total_gib + samples_gib(model))


def test_the_fidelity_guardrail_prices_the_largest_rung_of_its_ladder():
    cfg = preset("flux1_sol_rl_pickscore", "explore.guardrail.enabled=true")
    explore = fits.stage_memory(cfg, SCALED_MM_FP8)[0]
    # the default ladder escalates to fp8_emulated (a dequantized bf16 copy of the replaced layers), then fp32
    assert explore.precision == "fp8_emulated"
    emulated = reference("flux1", cfg.train.micro_batch, ExploreBackend("fp8_emulated", "emulated"))
    assert explore.gib == pytest.approx(explore_gib(emulated))
    assert fits.stage_memory(preset("flux1_sol_rl_pickscore"), SCALED_MM_FP8)[0].gib < explore.gib


def test_an_explore_sibling_is_priced_in_every_stage(tmp_path):
    """The sibling stays loaded beside W0: SD3.5 Medium beside SD3.5 Large adds Medium's weights to each stage; a
    sibling whose config cannot be read is priced as large as the trained model."""
    medium = _diffusers_dir(tmp_path / "sd35m", json.loads((config_dir() / "sd35-medium.transformer.json").read_text()))
    plain = {s.stage: s for s in fits.check_memory_fits(preset("sd35l_sol_rl_pickscore"), H200, TE_FP8)}
    with_medium = fits.check_memory_fits(preset("sd35l_sol_rl_pickscore", f"explore.sibling.path={medium}",
                                                "explore.sibling.policy=frozen"), H200, TE_FP8)
    medium_gib = memory.transformer_params("sd35m") * 2 / GIB
    for stage in with_medium:
        assert stage.parts["sibling"] == pytest.approx(medium_gib)
        assert stage.gib == pytest.approx(plain[stage.stage].gib + medium_gib)
    assert "explore sibling" in with_medium[0].describe()
    unknown = fits.check_memory_fits(preset("sd35l_sol_rl_pickscore", f"explore.sibling.path={tmp_path / 'x'}"),
                                     H200, TE_FP8)
    assert unknown[0].parts["sibling"] == pytest.approx(memory.transformer_params("sd35l") * 2 / GIB)
