"""quantize: merge θ_old into W0 and build the explore copy's quantization (report + merged weights)."""

from __future__ import annotations

import json

import torch

from solrl_core.prompts import CALIBRATION_PROMPT
from solrl_core.backbones.cache import load_backbone
from solrl_core.stages.checkpoints import attach_policy, load_adapters, previous_checkpoint
from solrl_core.stages.context import StageContext
from solrl_core.stages.explore_setting import explore_setting
from solrl_core.stages.transformer_copies import fresh_transformer
from solrl_core.storage import save_tensors


def build_explore_copy(ctx: StageContext, backbone, merged: dict[str, torch.Tensor]):
    """The explore copy: W0 + θ_old with its eligible Linear layers in the iteration's explore precision.

    Returns (model, report, setting). The copy is rebuilt from the merged weights each time (a stage may run in
    another process or on another pool); quantizing is deterministic, so every rebuild is the same copy."""
    from solrl_core.quant.backends import apply_backend

    setting = explore_setting(ctx)
    transformer = fresh_transformer(backbone)
    transformer.load_state_dict(merged)
    quant = ctx.cfg.quant
    skip = quant.skip_names if quant.skip_names is not None else backbone.defaults.quant_skip_names
    min_width = quant.min_width if quant.min_width is not None else backbone.defaults.quant_min_width
    report = apply_backend(
        transformer,
        setting.precision,
        skip,
        min_width,
        weight_fmt=quant.weight_format,
        act_fmt=quant.act_format,
        calibration=_calibration_forward(backbone, transformer, ctx.encode([CALIBRATION_PROMPT])),
    )
    info = {"precision": setting.precision, "steps": setting.steps, "reason": setting.reason,
            "escalations": list(setting.escalations)}
    return transformer, {**info, **report.to_dict()}, setting


def _calibration_forward(backbone, transformer, cond):
    """One fixed forward (seed 0 noise, sigma 0.5, the conditioning of a fixed prompt) used to measure the copy's
    output error."""
    x = backbone.initial_noise([0])
    sigma = torch.full((1,), 0.5)

    @torch.no_grad()
    def run():
        return backbone.velocity(transformer, x, sigma, cond)

    return run


def run_quantize(ctx: StageContext) -> dict:
    backbone = load_backbone(ctx.cfg)
    policy = attach_policy(ctx.cfg, backbone)
    load_adapters(policy, previous_checkpoint(ctx))
    merged = {k: v.contiguous() for k, v in policy.merged_state_dict("old").items()}
    _, report, _ = build_explore_copy(ctx, backbone, merged)
    with ctx.run.stage_output(ctx.iteration, "quantize") as out:
        save_tensors(merged, out / "merged_old.safetensors")
        (out / "report.json").write_text(json.dumps(report, indent=2))
    totals = report.get("totals", {})
    numbers = {k: v for k, v in totals.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {"precision": report["precision"], "steps": report["steps"], "reason": report["reason"], **numbers}
