"""Quantization coverage of the real backbones, built on the meta device from the configs shipped in the package."""

from pathlib import Path

import pytest
from torch import nn

from solrl_core.models.backbones.registry import backbone_spec
from solrl_core.models.backbones.specs.sana import NATIVE_SKIP as SANA_NATIVE_SKIP
from solrl_core.errors import SolrlError
from solrl_core.models.model_configs import PACKAGE_CONFIG_DIR
from solrl_core.models.quant import eligible_linears
from solrl_core.lab.quant_coverage import (
    COMMAND,
    MODELS,
    SANA_NATIVE_TO_DIFFUSERS,
    build_meta_model,
    coverage_table,
    format_markdown,
    main,
    render_document,
)
from repo_paths import ROOT

FLUX, SD35, SANA = (backbone_spec(key).defaults for key in ("flux1", "sd35l", "sana"))
FLUX_SKIP, FLUX_MIN_WIDTH = FLUX.quant_skip_names, FLUX.quant_min_width
SD35_SKIP, SD35_MIN_WIDTH = SD35.quant_skip_names, SD35.quant_min_width
SANA_SKIP = SANA.quant_skip_names
DOC = ROOT / "docs" / "quant_coverage.md"


@pytest.fixture(scope="module")
def config_dir() -> Path:
    return PACKAGE_CONFIG_DIR


@pytest.fixture(scope="module")
def rows(config_dir):
    return {r["key"]: r for r in coverage_table(config_dir)}


def test_sd35_large_attention_stays_high_precision(config_dir):
    model = build_meta_model(config_dir / "sd35-large.transformer.json")
    assert next(model.parameters()).device.type == "meta"
    replaced = set(eligible_linears(model, SD35_SKIP, 2432))
    attn = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and ".attn." in n]
    assert len(attn) == 38 * 8 - 1  # to_q/k/v, to_out.0, add_q/k/v_proj, to_add_out (last block: no to_add_out)
    for name in attn:
        lin = model.get_submodule(name)
        assert (lin.in_features, lin.out_features) == (2432, 2432)
        assert name not in replaced
    assert "transformer_blocks.0.ff.net.0.proj" in replaced and "transformer_blocks.0.ff.net.2" in replaced
    assert "transformer_blocks.0.norm1.linear" not in replaced  # skip name
    assert "transformer_blocks.0.ff_context.net.2" not in replaced


def reference_rule(model: nn.Module, skip_names, min_dim: int) -> set[str]:
    """The reference's layer selection, restated from NVlabs/Sana train_scripts/train_utils.py
    (replace_linear_with_te): a Linear goes to 4 bits unless a skip pattern is a substring of its qualified name or
    (min_dim > 0 and) max(in, out) <= min_dim."""
    return {
        name for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and not any(p in name for p in skip_names)
        and not (min_dim > 0 and max(m.in_features, m.out_features) <= min_dim)
    }


def test_sd35_large_context_modulation_stays_high_precision_as_in_the_reference(config_dir):
    model = build_meta_model(config_dir / "sd35-large.transformer.json")
    replaced = set(eligible_linears(model, SD35_SKIP, SD35_MIN_WIDTH))
    assert replaced == reference_rule(model, SD35_SKIP, SD35_MIN_WIDTH)
    # 2432 -> 6·2432, wider than the floor: only the skip name "norm1" (a substring of "norm1_context") keeps it.
    layer = model.get_submodule("transformer_blocks.3.norm1_context.linear")
    assert (layer.in_features, layer.out_features) == (2432, 6 * 2432)
    assert "transformer_blocks.3.norm1_context.linear" not in replaced
    assert not any(".norm1_context." in n for n in replaced)
    # The other direction: what no skip name contains and is wider than the floor does go to 4 bits.
    assert "transformer_blocks.3.ff.net.0.proj" in replaced and "transformer_blocks.3.ff.net.2" in replaced
    assert {n.split(".", 2)[2] for n in replaced} == {"ff.net.0.proj", "ff.net.2"}


def test_flux_selection_equals_the_reference_rule(config_dir):
    model = build_meta_model(config_dir / "flux1-dev.transformer.json")
    replaced = set(eligible_linears(model, FLUX_SKIP, FLUX_MIN_WIDTH))
    assert replaced == reference_rule(model, FLUX_SKIP, FLUX_MIN_WIDTH)
    kept = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)} - replaced
    assert kept == {  # each by a pattern inside its name; "x_embedder" is not inside "context_embedder"
        "x_embedder", "context_embedder", "norm_out.linear", *(
            f"time_text_embed.{e}.linear_{i}" for e in ("timestep_embedder", "guidance_embedder", "text_embedder")
            for i in (1, 2))}
    # Names that contain a skip name's words but not the name itself stay 4-bit.
    for name in ("transformer_blocks.0.norm1_context.linear", "single_transformer_blocks.0.norm.linear", "proj_out",
                 "transformer_blocks.0.ff_context.net.2"):
        assert name in replaced


def test_flux_attention_is_replaced(config_dir):
    model = build_meta_model(config_dir / "flux1-dev.transformer.json")
    replaced = set(eligible_linears(model, FLUX_SKIP, 1000))
    for prefix in ("transformer_blocks.0", "transformer_blocks.18", "single_transformer_blocks.37"):
        for proj in ("to_q", "to_k", "to_v"):
            name = f"{prefix}.attn.{proj}"
            assert model.get_submodule(name).in_features == 3072 and name in replaced
    assert "transformer_blocks.3.attn.add_q_proj" in replaced and "transformer_blocks.3.attn.to_out.0" in replaced
    for kept in ("x_embedder", "context_embedder", "norm_out.linear", "time_text_embed.timestep_embedder.linear_2"):
        assert kept not in replaced


def test_counts_are_consistent(rows):
    assert list(rows) == [m.key for m in MODELS]
    for r in rows.values():
        assert r["linear_total"] == r["linear_replaced"] + r["linear_kept"]
        fams = r["kept_families"] + r["replaced_families"]
        assert sum(f["count"] for f in fams) == r["linear_total"]
        assert sum(f["count"] for f in r["replaced_families"]) == r["linear_replaced"]
        assert sum(f["weights"] for f in fams) == r["linear_weights_total"]
        assert sum(f["weights"] for f in r["replaced_families"]) == r["linear_weights_low_precision"]
        assert r["weight_share"] == pytest.approx(r["linear_weights_low_precision"] / r["linear_weights_total"])
        assert 0.0 <= r["weight_share"] <= 1.0 and 0.0 <= r["flop_share_tokens"] <= 1.0
    got = {k: (r["linear_total"], r["linear_replaced"]) for k, r in rows.items()}
    assert got == {
        "flux1-dev": (504, 495),
        "sd35-large": (536, 76),
        "sd35-medium": (392, 48),
        "sana-1600m": (166, 0),
        "sana-1600m-linear-ffn": (206, 40),
        # 60 blocks x 14 Linear (img/txt modulation, 8 attention projections, 2 x 2 MLP) + 6 outside; kept: the
        # 2 timestep Linear, img_in, txt_in, norm_out.linear (the skip names)
        "qwen-image": (60 * 14 + 6, 60 * 14 + 1),
        # blocks x 10 Linear (4 self- and 4 cross-attention projections, 2 feed-forward) + 6 outside (time and text
        # embedders, proj_out); replaced: the feed-forward's 2, the only layers wider than the hidden width
        "wan2.1-t2v-1.3b": (30 * 10 + 6, 30 * 2),
        "wan2.1-t2v-14b": (40 * 10 + 6, 40 * 2),
        "wan2.2-t2v-a14b": (40 * 10 + 6, 40 * 2),  # each of its two experts: the 14B's layout and rule
        # the editing models: their base models' transformers (the source's tokens change the FLOPs, not the layers)
        "flux1-kontext-dev": (504, 495),
        "qwen-image-edit": (60 * 14 + 6, 60 * 14 + 1),
    }
    # Parameter counts of the configs (billions): the models really are the full-size ones.
    assert rows["flux1-dev"]["params_total"] / 1e9 == pytest.approx(11.90, abs=0.01)
    assert rows["sd35-large"]["params_total"] / 1e9 == pytest.approx(8.06, abs=0.01)
    assert rows["sana-1600m"]["params_total"] / 1e9 == pytest.approx(1.60, abs=0.01)
    assert rows["qwen-image"]["params_total"] / 1e9 == pytest.approx(20.43, abs=0.01)  # Qwen-Image's "20B"


def test_sana_native_names_are_all_mapped(rows):
    assert set(SANA_NATIVE_TO_DIFFUSERS) == set(SANA_NATIVE_SKIP)
    assert "attn1.to_q" in SANA_SKIP and "caption_projection" in SANA_SKIP and "time_embed.linear" in SANA_SKIP
    sana = rows["sana-1600m"]
    reasons = {f["family"]: f["reason"] for f in sana["kept_families"]}
    assert reasons["transformer_blocks.*.attn1.to_q"] == "skip 'attn1.to_q'"
    assert reasons["transformer_blocks.*.attn2.to_k"] == "width ≤ min width"
    assert reasons["time_embed.linear"] == "skip 'time_embed.linear'"
    assert sana["conv_share_of_matmul_weights"] > 0.4  # the GLUMBConv feed-forward is convolutional
    ffn = rows["sana-1600m-linear-ffn"]
    assert {f["family"] for f in ffn["replaced_families"]} == {
        "transformer_blocks.*.ff.conv_inverted", "transformer_blocks.*.ff.conv_point"}


def test_markdown_and_doc_are_current(rows, tmp_path, monkeypatch):
    table = format_markdown(list(rows.values()))
    assert "| SD3.5-Large | 6 names / 2432 | 536 | 76 | 460 |" in table
    doc = render_document(list(rows.values()), COMMAND)
    assert COMMAND in doc
    assert DOC.is_file(), f"{DOC} missing; regenerate with: {COMMAND}"
    assert DOC.read_text().rstrip("\n") == doc.rstrip("\n"), f"docs/quant_coverage.md is stale; regenerate with: {COMMAND}"
    # The documented command, run from a clone: no config directory to give, the package's configs are used.
    assert COMMAND == "python -m solrl_core.lab.quant_coverage --out docs/quant_coverage.md"
    monkeypatch.delenv("SOLRL_MODEL_CONFIGS", raising=False)
    out = tmp_path / "cov.md"
    assert main(["--out", str(out)]) == 0
    assert out.read_text() == DOC.read_text()


def test_missing_config_dir_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SolrlError, match="model config directory not found"):
        coverage_table(tmp_path / "nowhere")
    assert main([str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith("error: model config directory not found")
