"""quantize: the explore copy of this iteration, W0 + θ_old with its eligible Linear layers in the explore precision,
and its report (per-layer coverage, the output error of one fixed forward).

The stage writes the report only. Every process that explores builds the same copy itself from the previous
checkpoint (`explore_copy`: deterministic), so no merged weights are written to the run directory (a FLUX.1-sized
W0 + θ_old would be 24 GB an iteration). The copy shares W0's tensors with the loaded backbone: only the merged
LoRA-targeted layers and the quantized layers are new (`transformer_copies.merged_transformer`).

With ``quant.lora_branch`` the quantized base is W0 alone (it depends only on W0, the explore precision and the quant
settings: its `base_key`), and θ_old's LoRA runs in high precision beside it (solrl_core/models/quant/lora_branch.py). An
iteration whose base key equals the previous iteration's takes that report over (`base_from_iteration`), without
building anything.

With ``explore.sibling`` another model of the same kind takes W0's place in the copy (`explore_source`: its
transformer and schedule, the trained model's text encoders), with θ_old's update added to its own weights (policy
delta) or not (frozen); a guardrail escalation goes back to the trained model.

The stage's model work runs where explore runs: on one device worker when the stages are split over devices
(solrl_core/stages/shards.py), so the process that orchestrates them never loads the model.
"""

from __future__ import annotations

import hashlib
import json

import torch

from solrl_core.models.backbones.base import module_device
from solrl_core.errors import SolrlError
from solrl_core.models.backbones.cache import load_backbone, load_sibling
from solrl_core.models.step_cache import enable_step_cache
from solrl_core.prompts import CALIBRATION_PROMPT
from solrl_core.stages.checkpoints import attach_policy, full_weights, is_full, load_adapters, previous_checkpoint
from solrl_core.stages.context import StageContext
from solrl_core.stages.explore_setting import explore_setting
from solrl_core.stages.shards import OnePiece, split_or_whole
from solrl_core.stages.transformer_copies import lora_weights, merged_transformer


def build_explore_copy(ctx: StageContext, backbone, merged: dict[str, torch.Tensor] | None):
    """The explore copy: W0 with `merged` (parameter name → θ_old's weight, `old_policy_merged`; None = W0 alone, the
    lora_branch base) and its eligible Linear layers in the iteration's explore precision.

    Returns (model, report, setting). Quantizing is deterministic, so every process builds the same copy."""
    from solrl_core.models.quant.backends import apply_backend
    from solrl_core.models.quant.linear import explore_rule

    setting = explore_setting(ctx)
    transformer = merged_transformer(backbone, merged or {})
    merged = None  # the copy alone holds the merged layers now: each is freed when its layer is quantized
    quant = ctx.cfg.quant
    skip, min_width = explore_rule(quant, backbone.defaults)
    report = apply_backend(
        transformer,
        setting.precision,
        skip,
        min_width,
        weight_fmt=quant.weight_format,
        act_fmt=quant.act_format,
        calibration=_calibration_forward(backbone, transformer, ctx.encode([CALIBRATION_PROMPT])),
    )
    return transformer, {**setting_info(setting), **report.to_dict()}, setting


def setting_info(setting) -> dict:
    """What the quantize report says of the iteration's explore setting."""
    return {"precision": setting.precision, "steps": setting.steps, "reason": setting.reason,
            "escalations": list(setting.escalations), **setting.record()}


def old_policy_merged(ctx: StageContext, backbone, onto: torch.nn.Module | None = None) -> dict[str, torch.Tensor]:
    """Parameter name → weight of θ_old where it differs from W0 (`merged_transformer`), θ_old from the previous
    checkpoint: W0 + ΔW(θ_old) of the LoRA-targeted layers, with `onto` (an explore sibling's transformer) W +
    ΔW(θ_old) of its layers; under full fine-tuning every weight of θ_old."""
    from solrl_core.rl.policy import OLD

    if is_full(ctx.cfg):  # the config refuses a sibling's delta under full fine-tuning
        return full_weights(backbone, previous_checkpoint(ctx), OLD)
    policy = attach_policy(ctx.cfg, backbone)
    load_adapters(policy, previous_checkpoint(ctx))
    if onto is not None:
        check_sibling_layers(ctx, onto, policy.lora_factors(OLD))
    return lora_weights(policy.merged_weights(OLD, onto=onto))


def check_sibling_layers(ctx: StageContext, sibling: torch.nn.Module, factors: dict) -> None:
    """A SolrlError naming the first LoRA-targeted layer the sibling lacks or has in another shape (θ_old's update
    cannot be added to it)."""
    for name, (a, b, _) in factors.items():
        try:
            shape = tuple(sibling.get_submodule(name).weight.shape)
        except AttributeError:
            shape = None
        if shape != (b.shape[0], a.shape[1]):
            found = "has no such layer" if shape is None else f"has it as {shape}"
            raise SolrlError(
                f"explore.sibling.path {ctx.cfg.explore.sibling.path}: the LoRA-targeted layer {name} is "
                f"{(b.shape[0], a.shape[1])} in the trained model, the sibling {found}; θ_old's update cannot be "
                "added to it: set explore.sibling.policy: frozen (the sibling as loaded)")


def explore_source(ctx: StageContext, backbone):
    """The backbone the iteration's explore copy is built from and samples on: `backbone`, or its view with
    explore.sibling's model (`Backbone.sibling`) while the guardrail has not escalated."""
    sibling = explore_setting(ctx).sibling
    if sibling is None:
        return backbone
    view = load_sibling(ctx.cfg, sibling)
    if not getattr(view, "conditioning_checked", False):
        _check_sibling_conditioning(ctx, view)
        view.conditioning_checked = True
    return view


def _check_sibling_conditioning(ctx: StageContext, view) -> None:
    """One forward of the sibling on the trained model's conditioning; a SolrlError when it does not take it (another
    text encoder's width)."""
    run = _calibration_forward(view, view.transformer, ctx.encode([CALIBRATION_PROMPT]))
    try:
        run()
    except (RuntimeError, ValueError, TypeError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SolrlError(f"explore.sibling.path {ctx.cfg.explore.sibling.path}: its transformer does not take the "
                         f"trained model's conditioning ({detail}); a sibling must share its text encoders") from None


def explore_copy(ctx: StageContext, backbone):
    """The iteration's explore copy and its report: the merged W0 + θ_old quantized, or with ``quant.lora_branch``
    W0 quantized with θ_old's LoRA (the previous checkpoint's ``old`` adapter) in high precision beside each
    targeted layer. With explore.sibling the sibling's weights take W0's place; with its policy frozen θ_old is
    not added."""
    from solrl_core.models.quant.lora_branch import attach_lora_branches
    from solrl_core.rl.policy import OLD

    source = explore_source(ctx, backbone)
    sibling = source is not backbone
    follows = not sibling or ctx.cfg.explore.sibling.policy == "delta"
    onto = source.transformer if sibling else None
    if not ctx.cfg.quant.lora_branch:
        merged = old_policy_merged(ctx, backbone, onto) if follows else {}
        transformer, report, setting = build_explore_copy(ctx, source, merged)
    else:
        transformer, report, setting = build_explore_copy(ctx, source, None)
        if follows:
            policy = attach_policy(ctx.cfg, backbone)
            load_adapters(policy, previous_checkpoint(ctx))
            factors = policy.lora_factors(OLD)
            if sibling:
                check_sibling_layers(ctx, onto, factors)
            attach_lora_branches(transformer, factors)
    cache = ctx.cfg.explore.cache
    if not setting.escalations:  # a guardrail rung is a precision and steps alone: the cache goes with the first
        enable_step_cache(transformer, cache.kind, cache.options)
    return transformer, report


def explore_sampler(ctx: StageContext, backbone):
    """What the iteration's explore samples with: the explore copy, or with explore.full_precision_first/_last (while
    the configured setting holds: an escalation drops them, as the cache) a `StepSelective` whose first and last
    steps run at full precision on the same source: θ_old on W0 as the regenerate samples (no merged copy), or the
    sibling with θ_old's update merged (policy delta) or as loaded (frozen)."""
    from solrl_core.models.step_precision import StepSelective
    from solrl_core.stages.old_policy import old_policy_transformer

    low = explore_copy(ctx, backbone)[0]
    first, last = explore_setting(ctx).full_precision
    if not (first or last):
        return low
    source = explore_source(ctx, backbone)
    if source is backbone:
        full = old_policy_transformer(ctx, backbone)
    else:
        follows = ctx.cfg.explore.sibling.policy == "delta"
        full = merged_transformer(source, old_policy_merged(ctx, backbone, source.transformer) if follows else {})
    return StepSelective(low, full, first, last)


def base_key(ctx: StageContext) -> str:
    """What the lora_branch quantized base depends on: the model (and explore sibling), the explore precision and the
    quant settings."""
    quant = ctx.cfg.quant.model_dump(exclude={"lora_branch"})
    setting = explore_setting(ctx)
    parts = {"model": ctx.cfg.model.model_dump(mode="json"), "precision": setting.precision, "quant": quant,
             **({"sibling": setting.sibling} if setting.sibling else {})}  # keys of earlier runs unchanged
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


def _calibration_forward(backbone, transformer, cond):
    """One fixed forward (seed 0 noise, sigma 0.5, the conditioning of a fixed prompt) used to measure the copy's
    output error."""
    device = module_device(transformer)
    x = backbone.initial_noise([0]).to(device)
    at = 0.5
    sigma = torch.full((1,), at, device=device)

    @torch.no_grad()
    def run():
        with backbone.calls_at(transformer, at):
            return backbone.velocity(transformer, x, sigma, cond)

    return run


def _report(ctx: StageContext) -> dict:
    """The model work of the stage, in the process of a device: the copy's report (the copy itself is dropped)."""
    report = explore_copy(ctx, load_backbone(ctx.cfg))[1]
    if ctx.cfg.quant.lora_branch:
        report = {**report, "lora_branch": True, "base_key": base_key(ctx), "base_from_iteration": ctx.iteration}
    return report


def report_work(ctx: StageContext) -> OnePiece:
    """The stage's model work as split work of one piece (solrl_core/stages/shards.py)."""
    return OnePiece(_report, desc=f"quantize it{ctx.iteration}")


def run_quantize(ctx: StageContext) -> dict:
    info = setting_info(explore_setting(ctx))
    report = _previous_base_report(ctx, base_key(ctx)) if ctx.cfg.quant.lora_branch else None
    shards: list[dict] = []
    if report is None:
        report, shards = split_or_whole(ctx, report_work)
    report = {**report, **info}
    with ctx.run.stage_output(ctx.iteration, "quantize") as out:
        (out / "report.json").write_text(json.dumps(report, indent=2))
    totals = report.get("totals", {})
    numbers = {k: v for k, v in totals.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {"precision": report["precision"], "steps": report["steps"], "reason": report["reason"], **numbers,
            "shards": shards}
