"""quantize: merge θ_old into W0 and build the explore copy's quantization (report + merged weights).

With ``quant.lora_branch`` the quantized base is W0 alone (it depends only on W0, the explore precision and the quant
settings: its `base_key`), and θ_old's LoRA runs in high precision beside it (solrl_core/quant/lora_branch.py). The
stage then writes only the report, and quantizes only when the base changed: an iteration whose base key equals the
previous iteration's takes that report over (`base_from_iteration`), without building anything.
"""

from __future__ import annotations

import hashlib
import json

import torch

from solrl_core.prompts import CALIBRATION_PROMPT
from solrl_core.backbones.cache import load_backbone
from solrl_core.stages.checkpoints import attach_policy, load_adapters, previous_checkpoint
from solrl_core.stages.context import StageContext
from solrl_core.stages.explore_setting import explore_setting
from solrl_core.stages.transformer_copies import fresh_transformer
from solrl_core.storage import save_tensors


def build_explore_copy(ctx: StageContext, backbone, merged: dict[str, torch.Tensor] | None):
    """The explore copy: W0 + θ_old (`merged`; None = W0 alone, the lora_branch base) with its eligible Linear layers
    in the iteration's explore precision.

    Returns (model, report, setting). The copy is rebuilt from the merged weights each time (a stage may run in
    another process or on another pool); quantizing is deterministic, so every rebuild is the same copy."""
    from solrl_core.quant.backends import apply_backend

    setting = explore_setting(ctx)
    transformer = fresh_transformer(backbone)
    if merged is not None:
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


def build_branch_copy(ctx: StageContext, backbone) -> torch.nn.Module:
    """The lora_branch explore copy: W0 quantized (the same whatever θ_old is), θ_old's LoRA (the previous
    checkpoint's ``old`` adapter) in high precision beside each targeted layer."""
    from solrl_core.quant.lora_branch import attach_lora_branches
    from solrl_core.rl.policy import OLD

    transformer = build_explore_copy(ctx, backbone, None)[0]
    policy = attach_policy(ctx.cfg, backbone)
    load_adapters(policy, previous_checkpoint(ctx))
    attach_lora_branches(transformer, policy.lora_factors(OLD))
    return transformer


def base_key(ctx: StageContext) -> str:
    """What the lora_branch quantized base depends on: the model, the explore precision and the quant settings."""
    quant = ctx.cfg.quant.model_dump(exclude={"lora_branch"})
    parts = {"model": ctx.cfg.model.model_dump(mode="json"), "precision": explore_setting(ctx).precision,
             "quant": quant}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _previous_base_report(ctx: StageContext, key: str) -> dict | None:
    """The previous iteration's lora_branch report when its quantized base is the same (`key`); else None."""
    if ctx.iteration == 0 or not ctx.run.is_complete(ctx.iteration - 1, "quantize"):
        return None
    try:
        report = json.loads((ctx.run.stage_dir(ctx.iteration - 1, "quantize") / "report.json").read_text())
    except (OSError, ValueError):
        return None
    return report if report.get("base_key") == key else None


def _quantize_base(ctx: StageContext) -> dict:
    """The lora_branch stage: the base's report, taken over from the previous iteration when the base is the same."""
    setting = explore_setting(ctx)
    info = {"precision": setting.precision, "steps": setting.steps, "reason": setting.reason,
            "escalations": list(setting.escalations)}
    key = base_key(ctx)
    previous = _previous_base_report(ctx, key)
    if previous is not None:
        return {**previous, **info}
    previous_checkpoint(ctx)  # iteration 0: the initial adapters, written once before explore's processes read them
    report = build_explore_copy(ctx, load_backbone(ctx.cfg), None)[1]
    return {**report, "lora_branch": True, "base_key": key, "base_from_iteration": ctx.iteration}


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
    merged = None
    if ctx.cfg.quant.lora_branch:
        report = _quantize_base(ctx)
    else:
        backbone = load_backbone(ctx.cfg)
        policy = attach_policy(ctx.cfg, backbone)
        load_adapters(policy, previous_checkpoint(ctx))
        merged = {k: v.contiguous() for k, v in policy.merged_state_dict("old").items()}
        _, report, _ = build_explore_copy(ctx, backbone, merged)
    with ctx.run.stage_output(ctx.iteration, "quantize") as out:
        if merged is not None:
            save_tensors(merged, out / "merged_old.safetensors")
        (out / "report.json").write_text(json.dumps(report, indent=2))
    totals = report.get("totals", {})
    numbers = {k: v for k, v in totals.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {"precision": report["precision"], "steps": report["steps"], "reason": report["reason"], **numbers}
