"""SANA adapter on the tiny random-weight SANA directory, checked against SanaPipeline's own calls; and the
quantization coverage of the full-size SANA 1600M config (meta device)."""

import json

import diffusers
import numpy as np
import pytest
import torch
from torch import nn

import backbone_checks as checks
from backbone_checks import PROMPTS, RES
from solrl_core.errors import SolrlError
from solrl_core.models.backbones.sana import SanaBackbone
from solrl_core.models.backbones.specs.sana import NATIVE_SKIP, NATIVE_TO_DIFFUSERS
from solrl_core.models.meta_models import build_meta_model
from solrl_core.models.model_configs import PACKAGE_CONFIG_DIR
from solrl_core.models.quant import eligible_linears, quantize_linears
from solrl_core.models.quant.linear import skip_match
from solrl_core.stages.transformer_copies import fresh_transformer

MODEL_KIND = TINY_MODEL = "sana"
DEFAULTS = SanaBackbone.defaults
SANA_CONFIG = PACKAGE_CONFIG_DIR / "sana-1600m-1024px.transformer.json"
# the Linear layers of a block that the skip names leave (the feed-forward is convolutional): the self-attention
# output and the cross-attention projections
PER_BLOCK_QUANTIZABLE = ("attn1.to_out.0", "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0")


def _pipeline_run(backbone, latents, prompts, steps, output_type):
    """SanaPipeline with the directory's own scheduler and prompt handling, no CFG, no resolution binning. Returns
    its output and every transformer call: (hidden_states, timestep, encoder_hidden_states, mask, output)."""
    calls = []

    def record(module, args, kwargs, out):
        calls.append((args[0].clone(), kwargs["timestep"].clone(), kwargs["encoder_hidden_states"].clone(),
                      kwargs["encoder_attention_mask"].clone(), out[0].clone()))

    handle = backbone.transformer.register_forward_hook(record, with_kwargs=True)
    try:
        images = backbone.pipe(
            prompt=prompts, latents=latents.clone(), num_inference_steps=steps, guidance_scale=1.0, height=RES,
            width=RES, use_resolution_binning=False, output_type=output_type,
        ).images
    finally:
        handle.remove()
    return images, calls


def test_tiny_directory_is_complete_small_and_seeded(tiny_dir, tmp_path, backbone):
    checks.assert_complete_and_small(tiny_dir, {
        "transformer": "SanaTransformer2DModel", "vae": "AutoencoderDC", "text_encoder": "Gemma2Model",
        "tokenizer": "GemmaTokenizer", "scheduler": "DPMSolverMultistepScheduler",
    })
    config = backbone.transformer.config
    assert config.caption_channels == backbone.pipe.text_encoder.config.hidden_size
    assert config.in_channels == backbone.vae.config.latent_channels == 32
    assert backbone.pipe.vae_scale_factor == 32  # the real DC-AE spatial compression
    scheduler = backbone.pipe.scheduler.config  # SANA 1600M's: DPM-Solver++ on flow sigmas, shift 3
    assert (scheduler.use_flow_sigmas, scheduler.prediction_type) == (True, "flow_prediction")
    assert scheduler.flow_shift == 3.0
    tokenizer = backbone.pipe.tokenizer
    ids = tokenizer("a red circle, ünïcode").input_ids
    assert ids[0] == tokenizer.bos_token_id and tokenizer.unk_token_id not in ids  # <bos> first, bytes for the rest
    checks.assert_made_again_alike(tiny_dir, TINY_MODEL, tmp_path, backbone)


def test_latents_noise_and_defaults(backbone):
    assert backbone.latent_shape == (32, RES // 32, RES // 32)
    assert backbone.image_seq_len == (RES // 32) ** 2
    checks.assert_noise_is_per_seed(backbone)
    d = backbone.defaults
    assert (d.sampler, d.resolution, d.distilled_guidance, d.quant_min_width) == ("euler", 1024, False, 2240)
    # the reference (NVlabs/Sana): Gemma length TEXT_ENCODER_MAX_SEQ_LEN of train_scripts/sol_rl/train_sana.py, clip
    # train.max_grad_norm of configs/sol_rl/sana.py
    assert (backbone.max_sequence_length, d.grad_clip) == (300, 1.0)


def test_encode_prompts(backbone):
    checks.assert_encoding_deterministic_and_batch_first(
        backbone, {"encoder_hidden_states": (2, 300, 32), "encoder_attention_mask": (2, 300)}
    )
    # the empty prompt is the pipeline's negative prompt: encoded without the instruction
    cond = backbone.encode_prompts(PROMPTS[:1])
    _, _, negative, negative_mask = backbone.pipe.encode_prompt(
        PROMPTS[:1], do_classifier_free_guidance=True, negative_prompt="", device=backbone.device
    )
    mixed = backbone.encode_prompts(["", PROMPTS[0]])
    torch.testing.assert_close(mixed["encoder_hidden_states"][0], negative[0])
    assert torch.equal(mixed["encoder_attention_mask"][0], negative_mask[0])
    torch.testing.assert_close(mixed["encoder_hidden_states"][1], cond["encoder_hidden_states"][0])
    blank = backbone.encode_prompts([" "])  # not empty: encoded with the instruction
    assert not torch.allclose(mixed["encoder_hidden_states"][0], blank["encoder_hidden_states"][0])


def test_velocity_matches_the_pipelines_transformer_calls(backbone):
    """Every transformer call of a 2-step SanaPipeline run (its own DPM-Solver scheduler, its own prompt encoding)
    equals the adapter's velocity at sigma = timestep / 1000 with the adapter's conditioning."""
    x = backbone.initial_noise([0, 1])
    _, calls = _pipeline_run(backbone, x, PROMPTS, steps=2, output_type="latent")
    assert len(calls) == 2 and torch.equal(calls[0][0], x)
    cond = backbone.encode_prompts(PROMPTS)
    for hidden, timestep, embeds, mask, out in calls:
        assert torch.equal(cond["encoder_hidden_states"], embeds) and torch.equal(cond["encoder_attention_mask"], mask)
        sigma = timestep / backbone.pipe.scheduler.config.num_train_timesteps
        assert 0 < float(sigma[0]) <= 1
        v = backbone.velocity(backbone.transformer, hidden, sigma, cond)
        assert v.shape == hidden.shape and torch.isfinite(v).all()
        torch.testing.assert_close(v, out, rtol=1e-5, atol=1e-6)
    assert calls[1][1][0] < calls[0][1][0]  # the second call is at a lower noise level
    checks.assert_velocity_batch_consistent(backbone)


def test_decode_matches_the_pipeline(backbone):
    x = backbone.initial_noise([5, 6, 7])
    prompts = [*PROMPTS, "a cat"]
    latents, _ = _pipeline_run(backbone, x, prompts, steps=1, output_type="latent")
    reference, _ = _pipeline_run(backbone, x, prompts, steps=1, output_type="np")
    checks.assert_decode(backbone, latents, reference)
    assert np.array_equal(backbone.decode(latents), (reference * 255).round().astype(np.uint8))


def test_sigmas_are_uniform_without_the_schedulers_shift(backbone):
    """The reference's `pipeline_with_logprob_sana` (NVlabs/Sana) samples on uniform sigmas from 1 to 0 (its
    `steps + 1` points, terminal 0 excluded here), unshifted, although SANA's own scheduler config shifts by 3."""
    assert backbone.pipe.scheduler.config.flow_shift == 3.0
    assert backbone.sigmas(4) == [1.0, 0.75, 0.5, 0.25]
    for steps in (6, 10, 40):
        assert np.allclose(backbone.sigmas(steps), np.linspace(1, 0, steps + 1)[:-1], rtol=0, atol=1e-12)
    with pytest.raises(ValueError):
        backbone.sigmas(0)


def test_lora_targets_and_quant_skip_names(backbone):
    # the official names of the guidance-embedding variant's modules (t_embedder, cfg_embedder there)
    guidance_variant = frozenset({"time_embed.timestep_embedder", "time_embed.guidance_embedder"})
    checks.assert_lora_targets_and_skip_names(backbone, guidance_variant)
    config = {**json.loads(SANA_CONFIG.read_text()), "guidance_embeds": True}
    with torch.device("meta"):
        variant = diffusers.SanaTransformer2DModel.from_config(config)
    names = [n for n, _ in variant.named_modules()]
    assert all(any(skip_match(n, [skip]) for n in names) for skip in guidance_variant)
    # the official native names, each mapped onto the diffusers modules holding its weights
    assert DEFAULTS.quant_skip_names == [d for native in NATIVE_SKIP for d in NATIVE_TO_DIFFUSERS[native]]


def test_explore_copy_below_the_official_width(backbone):
    """The official width keeps every Linear of the model in full precision; below it the self-attention output
    and the cross-attention projections of every block run in NVFP4 (emulated) and still give a finite,
    close velocity."""
    official = fresh_transformer(backbone)
    assert quantize_linears(official, DEFAULTS.quant_skip_names, DEFAULTS.quant_min_width).n_replaced == 0
    explore = fresh_transformer(backbone)
    report = quantize_linears(explore, DEFAULTS.quant_skip_names, 0)
    assert {row.name.split(".", 2)[2] for row in report.layers if row.replaced} == set(PER_BLOCK_QUANTIZABLE)
    assert report.n_replaced == len(PER_BLOCK_QUANTIZABLE) * backbone.transformer.config.num_layers
    cond = backbone.encode_prompts(PROMPTS)
    x, sigma = backbone.initial_noise([0, 1]), torch.tensor([0.8, 0.4])
    with torch.no_grad():
        v = backbone.velocity(explore, x, sigma, cond)
        reference = backbone.velocity(backbone.transformer, x, sigma, cond)
    assert torch.isfinite(v).all() and not torch.equal(v, reference)
    assert (v - reference).norm() < 0.5 * reference.norm()


def test_full_size_sana_official_rule_quantizes_nothing():
    model = build_meta_model(SANA_CONFIG)
    linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    unskipped = [m for n, m in linears.items() if not skip_match(n, DEFAULTS.quant_skip_names)]
    assert unskipped and max(max(m.in_features, m.out_features) for m in unskipped) <= 2240
    ffn = [m for n, m in model.named_modules() if ".ff." in f".{n}"]
    assert ffn and not any(isinstance(m, nn.Linear) for m in ffn) and any(isinstance(m, nn.Conv2d) for m in ffn)
    assert eligible_linears(model, DEFAULTS.quant_skip_names, DEFAULTS.quant_min_width) == []
    # any min width below 2240: the self-attention output and all cross-attention projections of every block
    expected = {f"transformer_blocks.{i}.{p}" for i in range(model.config.num_layers) for p in PER_BLOCK_QUANTIZABLE}
    for min_width in (2239, 1000, 0):
        assert set(eligible_linears(model, DEFAULTS.quant_skip_names, min_width)) == expected


def test_release_text_encoders(tiny_dir):
    checks.assert_text_encoders_released(checks.load_tiny(MODEL_KIND, tiny_dir), ("text_encoder",))


def test_load_errors(tiny_dir, tmp_path):
    broken = checks.assert_path_errors(MODEL_KIND, tiny_dir, tmp_path, "vae")
    with pytest.raises(SolrlError, match="multiple of 32"):
        checks.load_tiny(MODEL_KIND, tiny_dir, resolution=48)
    (broken / "vae").mkdir()  # the folder is back, its weights are not
    with pytest.raises(SolrlError, match="cannot load SanaPipeline") as err:
        checks.load_tiny(MODEL_KIND, broken)
    assert "\n" not in str(err.value)
