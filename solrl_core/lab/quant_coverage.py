"""Quantization coverage of the real backbones, without weights.

Builds the full-size model of every backbone spec (``solrl_core/models/backbones/specs/``: FLUX.1-dev, SD3.5-Large/-Medium,
SANA 1600M; one row per ``CoverageRow`` of a spec) from its diffusers transformer config on the meta device (no
memory, no weights), applies the spec's official skip names and minimum width (``docs/method.md``) and
reports, per model: Linear layers total / replaced / kept, the low-precision share of Linear weights (= of
per-token Linear FLOPs), a token-weighted FLOP share at the official resolution, and which families of layers
stay in high precision and why. Uses ``eligible_linears`` — exactly the rule the explore copy applies.

    python -m solrl_core.lab.quant_coverage --out docs/quant_coverage.md   # configs shipped in solrl_core/models/model_configs

SANA. The official list is in native Sana module names; the pipeline runs diffusers' ``SanaTransformer2DModel``.
``SANA_NATIVE_TO_DIFFUSERS`` (``solrl_core/models/backbones/specs/sana.py``) maps each native name onto the diffusers
modules that hold the same weights:
t_embedder → time_embed.emb.timestep_embedder (time_embed.timestep_embedder in the guidance-embedding variant),
t_block → time_embed.linear, cfg_embedder → time_embed.guidance_embedder, y_embedder → caption_projection,
x_embedder → patch_embed (a conv), final_layer → norm_out + proj_out, logvar_linear → nothing (a training-time head
diffusers does not build), attn.qkv (one fused 3·C projection) → attn1.to_q, attn1.to_k, attn1.to_v.
Two consequences worth knowing: diffusers splits native fused layers, so the width rule sees narrower layers
(native cross_attn.kv_linear is 2240→4480 and would be quantized; diffusers' attn2.to_k / attn2.to_v are
2240→2240 each and stay in high precision), and the standard SANA 1600M feed-forward (GLUMBConv) is made of
convolutions, which a Linear swap never touches. The extra row "FFN 1×1 convs as Linear" counts the FFN's 1×1
convs as Linear layers, a stand-in for the LinearFFN variant the official recipe runs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from torch import nn

from solrl_core.models.backbones.spec import TokenLayout
from solrl_core.models.backbones.specs.sana import NATIVE_TO_DIFFUSERS as SANA_NATIVE_TO_DIFFUSERS
from solrl_core.errors import SolrlError
from solrl_core.models.model_configs import config_dir as resolve_config_dir
from solrl_core.models.meta_models import MODELS, ModelSpec, build_meta_model, ffn_convs_as_linear
from solrl_core.models.quant.linear import _keep_reason, _linears, eligible_linears, nvfp4_shape_rule, skip_match


# ---------------------------------------------------------------------------------------------- token streams

def token_stream(name: str, layout: TokenLayout) -> str:
    """Which tokens a Linear runs on: "sample" (once per sample: timestep/AdaLN modulation), "text", "joint" (image
    and text tokens concatenated, e.g. FLUX's single-stream blocks) or "image" (the backbone's `TokenLayout`)."""
    for stream in ("sample", "text", "joint"):
        if skip_match(name, getattr(layout, stream)):
            return stream
    return "image"


def _tokens(stream: str, spec: ModelSpec) -> int:
    return {"sample": 1, "text": spec.text_tokens, "image": spec.image_tokens,
            "joint": spec.image_tokens + spec.text_tokens}[stream]


# ---------------------------------------------------------------------------------------------- report


def layer_family(name: str) -> str:
    """A layer's name with block indices replaced by ``*`` ("transformer_blocks.*.attn.to_q")."""
    return re.sub(r"(?:^|(?<=\.))((?:single_)?transformer_blocks)\.\d+(?=\.|$)", r"\1.*", name)


def _short_reason(reason: str) -> str:
    if reason.startswith("max(in, out)"):
        return "width ≤ min width"
    if reason.startswith("skip name"):
        return reason.replace("skip name", "skip")
    return reason


def coverage_row(spec: ModelSpec, config_dir: str | Path) -> dict:
    """The coverage of one ``ModelSpec`` (see ``coverage_table``)."""
    model = build_meta_model(Path(config_dir) / spec.config_file)
    params_total = sum(p.numel() for p in model.parameters())
    conv_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Conv2d))
    # a convolutional feed-forward (SANA's GLUMBConv) holds weights a Linear swap never touches: report their share
    conv_ffn = any(isinstance(m, nn.Conv2d) and ".ff." in f".{n}." for n, m in model.named_modules())
    if spec.ffn_convs_as_linear:
        ffn_convs_as_linear(model)
    skip, min_width = list(spec.skip_names), spec.min_width
    replaced = set(eligible_linears(model, skip, min_width))
    linears = _linears(model)

    weights_total = weights_low = flops_total = flops_low = 0
    families: dict[str, dict] = {}
    for name, lin in linears:
        w = lin.in_features * lin.out_features
        stream = token_stream(name, spec.tokens)
        f = w * _tokens(stream, spec)
        is_low = name in replaced
        weights_total += w
        flops_total += f
        if is_low:
            weights_low += w
            flops_low += f
        reason = "replaced" if is_low else _short_reason(_keep_reason(name, lin, skip, min_width, nvfp4_shape_rule))
        fam = families.setdefault(
            layer_family(name),
            {"family": layer_family(name), "count": 0, "shape": f"{lin.in_features}→{lin.out_features}",
             "tokens": stream, "replaced": is_low, "reason": reason, "weights": 0},
        )
        fam["count"] += 1
        fam["weights"] += w
        if fam["replaced"] != is_low or fam["reason"] != reason:  # mixed family (e.g. last block differs)
            fam["reason"] = "mixed"
    kept = [f for f in families.values() if not f["replaced"]]
    return {
        "key": spec.key,
        "model": spec.title,
        "class": type(model).__name__,
        "config_file": spec.config_file,
        "params_total": params_total,
        "skip_names": skip,
        "min_width": min_width,
        "rule_note": spec.rule_note,
        "resolution": spec.resolution,
        "image_tokens": spec.image_tokens,
        "text_tokens": spec.text_tokens,
        "linear_total": len(linears),
        "linear_replaced": len(replaced),
        "linear_kept": len(linears) - len(replaced),
        "linear_weights_total": weights_total,
        "linear_weights_low_precision": weights_low,
        "weight_share": weights_low / weights_total if weights_total else 0.0,
        "flop_share_tokens": flops_low / flops_total if flops_total else 0.0,
        "conv_weights": conv_weights,
        "conv_share_of_matmul_weights": conv_weights / (conv_weights + weights_total) if conv_ffn
        and not spec.ffn_convs_as_linear else None,
        "kept_families": kept,
        "replaced_families": [f for f in families.values() if f["replaced"]],
    }


def coverage_table(config_dir: str | Path | None = None, specs: tuple[ModelSpec, ...] = MODELS) -> list[dict]:
    """One dict per model (see ``coverage_row``): counts, shares and the high-precision families.

    ``config_dir`` holds the diffusers transformer configs; None: $SOLRL_MODEL_CONFIGS, else the configs shipped in
    the package (``solrl_core.models.model_configs.config_dir``). SolrlError naming the directory when it is missing;
    FileNotFoundError when a config in it is.
    """
    directory = resolve_config_dir(config_dir)
    return [coverage_row(spec, directory) for spec in specs]


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _kept_summary(row: dict) -> str:
    """Compact "family (n, reason)" list of the kept layers, grouped by reason."""
    by_reason: dict[str, list[str]] = {}
    for f in row["kept_families"]:
        short = re.sub(r"^(transformer_blocks|single_transformer_blocks)\.\*\.", "", f["family"])
        prefix = "single." if f["family"].startswith("single_transformer_blocks") else ""
        by_reason.setdefault(f["reason"], []).append(f"{prefix}{short}")
    return "; ".join(f"{reason}: {', '.join(names)}" for reason, names in by_reason.items())


def format_markdown(rows: list[dict]) -> str:
    """The coverage table (one line per model) and, per model, the families of layers kept in high precision."""
    out = [
        "| model | skip names / min width | Linear layers | replaced | kept | low-precision share of Linear "
        "weights (= per-token FLOPs) | share of Linear FLOPs, token-weighted at the official resolution |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        rule = f"{len(r['skip_names'])} names / {r['min_width']}"
        out.append(
            f"| {r['model']} | {rule} | {r['linear_total']} | {r['linear_replaced']} | {r['linear_kept']} | "
            f"{_pct(r['weight_share'])} | {_pct(r['flop_share_tokens'])} |"
        )
    out.append("")
    for r in rows:
        out.append(f"### {r['model']} (`{r['config_file']}`, min width {r['min_width']})")
        out.append("")
        note = f" Rule: {r['rule_note']}." if r["rule_note"] else ""
        out.append(
            f"{r['class']}, {r['params_total'] / 1e9:.2f} B parameters; tokens per sample at {r['resolution']} px: "
            f"{r['image_tokens']} image + {r['text_tokens']} text.{note} Skip names: "
            + ", ".join(f"`{s}`" for s in r["skip_names"])
            + "."
        )
        if r["conv_share_of_matmul_weights"] is not None:
            out.append(
                f"Convolutions (patch embedding, the GLUMBConv feed-forward) hold {_pct(r['conv_share_of_matmul_weights'])} "
                "of the per-token matmul weights and are never replaced by a Linear swap."
            )
        out.append("")
        out.append("| layer family | n | shape | tokens | precision |")
        out.append("|---|---:|---|---|---|")
        for f in r["replaced_families"] + r["kept_families"]:
            prec = "low" if f["replaced"] else f"high ({f['reason']})"
            out.append(f"| `{f['family']}` | {f['count']} | {f['shape']} | {f['tokens']} | {prec} |")
        out.append("")
    return "\n".join(out)


_HEADER = """# Explore quantization coverage of the real backbones

Regenerate with

    {command}

Built from the diffusers transformer configs shipped in `solrl_core/models/model_configs/` (meta device, no weights).
The rule is the explore copy's (`solrl_core.models.quant.eligible_linears`, as `apply_backend` applies it), the reference
code's: a Linear stays in high precision if a skip name is a substring of its qualified name ("norm1" keeps
`norm1_context.linear` too), or if max(in, out) ≤ min width; ours adds that in_features be a multiple of 16 (the
real-GEMM backends also need out_features % 16), which every layer of these models meets.
Skip names and min widths are the official ones (`docs/method.md`).

Columns. *Low-precision share of Linear weights*: replaced weight elements (in × out) over all Linear weight
elements, which equals the share of Linear FLOPs if every layer ran once per token. *Token-weighted*: each layer's
in × out times the tokens it runs on for one sample at the official resolution (timestep / AdaLN modulation layers
once per sample; text-stream layers on the text tokens; image-stream layers on the latent tokens; FLUX's
single-stream blocks on both) — closer to where the explore copy's time goes. Attention score/value products and
convolutions are not Linear FLOPs and are not counted.

"""

_NOTES = """
## Notes

- **SD3.5-Large**: with min width 2432 (= the hidden size) every attention projection (`to_q/k/v`, `to_out.0`,
  `add_*_proj`, `to_add_out`; 2432→2432) stays in high precision, and so do both AdaLN modulations (`norm1.linear`
  and, "norm1" being a substring of its name, `norm1_context.linear`); the image-stream MLP (`ff`) is what runs in
  NVFP4.
- **FLUX.1-dev**: min width 1000 is below every block layer, so all attention (3072-wide), MLP and modulation
  layers of both block kinds are replaced, and so is the final `proj_out` (3072→64).
- **SANA 1600M**: native names are mapped onto diffusers modules as follows (`SANA_NATIVE_TO_DIFFUSERS`):
{sana_map}
  In diffusers' standard SANA every attention Linear is 2240-wide (≤ 2240, kept) and the feed-forward is
  convolutional, so **no Linear layer is replaced**: a NVFP4 explore copy of this model is full precision. Native
  Sana fuses `cross_attn.kv_linear` (2240→4480, which the rule would replace; it runs on the 300 caption tokens
  only) — diffusers splits it into `attn2.to_k`/`attn2.to_v`. The official recipe runs a "LinearFFN" variant whose
  feed-forward is Linear; the row "FFN 1×1 convs as Linear" approximates it by counting the FFN's 1×1 convs
  (2240→11200 and 5600→2240) as Linear layers — those are then replaced and carry the low-precision share.
- **SD3.5-Medium** has no official setting: SD3.5-L's skip names with min width 1536 (its hidden size, as 2432
  is SD3.5-L's) and with 2432 itself select the same layers (every layer not skipped by name is ≤ 1536 or
  ≥ 6144 wide).
"""


COMMAND = "python -m solrl_core.lab.quant_coverage --out docs/quant_coverage.md"  # what regenerates the document


def render_document(rows: list[dict], command: str = COMMAND) -> str:
    sana_map = "\n".join(
        f"  - `{native}` → " + (", ".join(f"`{d}`" for d in targets) if targets else "nothing (not built by diffusers)")
        for native, targets in SANA_NATIVE_TO_DIFFUSERS.items()
    )
    return _HEADER.format(command=command) + format_markdown(rows) + _NOTES.format(sana_map=sana_map)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solrl_core.lab.quant_coverage", description=__doc__.split("\n\n")[0])
    parser.add_argument("config_dir", nargs="?", default=None,
                        help="directory of the diffusers transformer configs (default: $SOLRL_MODEL_CONFIGS, else the "
                        "ones shipped in solrl_core/models/model_configs)")
    parser.add_argument("--out", help="write the markdown document here instead of stdout")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of markdown")
    args = parser.parse_args(argv)
    try:
        rows = coverage_table(args.config_dir)
    except SolrlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        text = json.dumps(rows, indent=2)
    else:
        text = render_document(rows, COMMAND)
    if args.out:
        Path(args.out).write_text(text + ("\n" if not text.endswith("\n") else ""))
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
