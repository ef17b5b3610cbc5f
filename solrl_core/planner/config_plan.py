"""`solrl plan CONFIG`: the cost plan of a run config — its backbone and its per-iteration sizes — for every family.

The config's own family is priced exactly as configured (``shapes_from_config``: prompts per iteration, N, K, explore
precision and steps, regenerate steps, training timesteps, optimizer steps). The other three families are priced at
the same sizes, so the four can be compared: the same prompts, N and K; the config's full step count for full-precision
sampling and its reduced explore step count for sol_rl (the official 6 when the config has no reduced count); for a
baseline config, which samples only K seeds, N = 4·K (the official 96 / 24).

The backbone: ``model.kind`` (flux1, sana; sd35 → sd35m when ``model.path`` names a medium checkpoint, else sd35l;
``flops.planner_model``), counted at the config's resolution, frames and text length with the config's
``quant.skip_names`` / ``quant.min_width`` when set; or, for a model shipped with solrl (the embedded image and video
models), its own forward (decode and reward free);
``model`` (``--model``) prices the shapes on another backbone, at its official resolution and rule.
"""

from __future__ import annotations

from dataclasses import replace

from solrl_core.models.backbones.registry import backbone_spec, backbone_specs
from solrl_core.planner.flops import ForwardFlops, planner_model
from solrl_core.rl.objectives import objective_for
from solrl_core.planner.cost_model import (
    FAMILIES,
    Shapes,
    Throughput,
    calibrated,
    iteration_cost,
    official_shapes,
    plan_result,
    update_assumption,
    shapes_from_config,
)

OFFICIAL_REDUCED_STEPS = 6
OFFICIAL_SEEDS_PER_KEPT = 4  # N = 96 for K = 24


def family_shapes(cfg, spec=None) -> dict[str, Shapes]:
    """Every family's ``Shapes`` at the config's sizes (module docstring); the config's own family as configured
    (``spec``: the backbone spec it is priced on, when not the config's model's)."""
    own = shapes_from_config(cfg, spec)
    full_steps = own.regenerate_steps if own.regenerate else own.explore_steps
    reduced_steps = own.explore_steps if own.regenerate else OFFICIAL_REDUCED_STEPS
    seeds = own.k * OFFICIAL_SEEDS_PER_KEPT if own.family == "baseline" else own.seeds
    out = {}
    for family in FAMILIES:
        if family == own.family:
            out[family] = own
            continue
        shapes = official_shapes(family, cfg.train.timestep_fraction, prompts=own.prompts, seeds=seeds, k=own.k,
                                 explore_steps_sol=reduced_steps, steps=full_steps)
        out[family] = replace(shapes, optimizer_steps=own.optimizer_steps, standin_forwards=own.standin_forwards)
    return out


def embedded_forward(cfg) -> ForwardFlops:
    """FLOPs of one forward of the run's own transformer, a model whose weights ship with solrl (the embedded image or
    video model: its spec's `shipped`), for one sample, counted on the real module, with the Linear layers the explore
    copy quantizes as the low-precision share."""
    import math

    import torch

    from solrl_core.planner.flops import count_flops
    from solrl_core.models.quant.linear import eligible_linears, explore_rule
    from solrl_core.models.backbones.cache import load_backbone
    from solrl_core.prompts import CALIBRATION_PROMPT

    backbone = load_backbone(cfg)
    transformer = backbone.transformer
    low = eligible_linears(transformer, *explore_rule(cfg.quant, backbone.defaults))
    cond = backbone.encode_prompts([CALIBRATION_PROMPT])
    x = torch.zeros(1, *backbone.latent_shape)
    sigma = torch.full((1,), 0.5)
    b = count_flops(transformer, lambda: backbone.velocity(transformer, x, sigma, cond), low)
    patch = transformer.config.patch_size  # an image model's side, a video model's (frames, height, width)
    patch = tuple(patch) if isinstance(patch, (list, tuple)) else (patch, patch)
    grid = backbone.latent_shape[-len(patch):]
    spec = backbone_spec(planner_model(cfg))
    return ForwardFlops(
        model=spec.key, title=f"{spec.title} ({type(transformer).__name__}, pixel space, shipped with solrl)",
        model_class=type(transformer).__name__, params=sum(p.numel() for p in transformer.parameters()),
        resolution=int(backbone.latent_shape[-1]), image_tokens=math.prod(g // k for g, k in zip(grid, patch)),
        text_tokens=int(cond["encoder_hidden_states"].shape[1]), total=b.total, linear=b.linear,
        conv=b.conv, attention=b.attention, low_precision=b.low_precision, low_precision_layers=len(low),
        by_op=b.by_op,
    )


def config_forward(cfg, model: str | None = None) -> tuple[ForwardFlops, dict, str, str | None]:
    """(one forward's FLOPs, decoding and scoring FLOPs per sample, title, note) of the config's backbone at the
    config's resolution, frames and text length, with its quantization rule (`model`: a full-size backbone to price
    it on instead, at that backbone's official shapes and rule)."""
    from solrl_core.planner.fits import config_tokens
    from solrl_core.planner.flops import decode_and_score_flops, forward_flops, get_model

    key = model or planner_model(cfg)
    if key in {s.key for s in backbone_specs() if s.shipped}:
        fwd = embedded_forward(cfg)
        return fwd, {"total": 0.0}, fwd.title, None
    m = get_model(key)
    if model:
        return forward_flops(m.key), decode_and_score_flops(m.key), m.spec.title, m.note
    shape = {}  # the config's own sample and quantization rule
    if cfg.quant.skip_names is not None:
        shape["skip_names"] = tuple(cfg.quant.skip_names)
    if cfg.quant.min_width is not None:
        shape["min_width"] = cfg.quant.min_width
    image, text = config_tokens(cfg, m.backbone)
    if image is not None:
        shape.update(image_tokens=image, resolution=cfg.model.resolution or m.spec.resolution)
    if text is not None:
        shape["text_tokens"] = text
    sample = {"resolution": cfg.model.resolution, "frames": cfg.model.frames} if image is not None else {}
    return forward_flops(m.key, **shape), decode_and_score_flops(m.key, **sample), m.spec.title, m.note


def plan_config(cfg, gpu: str, gpus: int = 8, utilisation: float | None = None, model: str | None = None,
                calibration=None, price_per_gpu_hour: float | None = None) -> dict:
    """The plan of a validated ``RunConfig`` on ``gpus`` × ``gpu``: the same keys as ``planner.cost_model.plan`` plus
    ``config``, ``config_family`` and ``run`` (each family's whole run, ``run_total.run_totals``, costed at
    ``price_per_gpu_hour`` when given). SolrlError (one line) for an unknown GPU or model. ``calibration``: as in
    ``planner.cost_model.plan``."""
    from solrl_core.planner.gpus import DEFAULT_UTILISATION, get_gpu

    g = get_gpu(gpu)
    fwd, per_image, title, note = config_forward(cfg, model)
    u = DEFAULT_UTILISATION if utilisation is None else float(utilisation)
    tp = Throughput(g, gpus, u, calibration.per_precision() if calibration is not None else {})
    costs = {family: iteration_cost(fwd, shapes, tp, per_image["total"], per_image.get("decode", 0.0))
             for family, shapes in family_shapes(cfg, priced_spec(model)).items()}
    result = plan_result(fwd.model, title, note, g, gpus, u, utilisation is not None, cfg.train.timestep_fraction,
                         fwd, per_image, costs, ("families other than the config's own: the config's prompts, N, K "
                                                 "and step counts (solrl_core/planner/config_plan.py)",
                                                 *sibling_assumption(cfg)),
                         update_assumption(objective_for(cfg)))
    from solrl_core.planner.disk import run_disk

    from solrl_core.planner.run_total import run_totals

    run = run_totals(cfg, costs, fwd, tp, per_image["total"], price_per_gpu_hour)
    extra = {"run": {family: total.to_dict() for family, total in run.items()}, "disk": run_disk(cfg, model).to_dict()}
    if not model:
        extra["memory"] = config_memory(cfg, g)
    return {"config": cfg.name, "config_family": cfg.family, **calibrated(result, calibration), **extra}


def priced_spec(model: str | None):
    """The backbone spec of the full-size model a config is priced on instead of its own (None: its own)."""
    from solrl_core.planner.flops import get_model

    return None if not model else backbone_spec(get_model(model).backbone)


def sibling_assumption(cfg) -> tuple[str, ...]:
    """The plan's line on an explore sibling: its explore is priced as the trained model's forward."""
    if cfg.explore.sibling.path is None:
        return ()
    return ("explore with the sibling explore.sibling.path: priced at the trained model's FLOPs per step (its own "
            "share: solrl calibrate-explore --sibling, column 'FLOPs left'); its weights count in the memory",)


def config_memory(cfg, gpu) -> dict | None:
    """The config's per-GPU memory per stage (``fits.stage_memory``) with ``explore.precision`` as it resolves on
    ``gpu`` with transformer-engine installed, and the explore stage without it where that differs; None for a
    backbone the planner has no full-size model of."""
    from dataclasses import asdict

    from solrl_core.planner.explore_copy import backend_on_gpu
    from solrl_core.planner.fits import MARGIN_GIB, fit_on_card, stage_memory

    with_te = backend_on_gpu(cfg.explore.precision, gpu)
    stages = stage_memory(cfg, with_te)
    if stages is None:
        return None
    without = backend_on_gpu(cfg.explore.precision, gpu, transformer_engine=False)
    other = None if without == with_te else next(s for s in stage_memory(cfg, without) if s.stage == "explore")
    return {"explore_backend": asdict(with_te), "stages": {s.stage: {"gib": s.gib, "parts": s.parts} for s in stages},
            "explore_without_te": None if other is None else {"backend": asdict(without), "gib": other.gib},
            "margin_gib": MARGIN_GIB, "gpu": gpu.title,
            "fit": fit_on_card(cfg, gpu.memory_gib, with_te)}
