"""The cost model: seconds per stage and per iteration of each family on a given GPU, from counted FLOPs.

Time of a piece of work = its FLOPs / (peak dense throughput of its precision × utilisation × number of GPUs).
Work is split evenly over data-parallel GPUs (communication is not modeled: only LoRA gradients are exchanged).

Per iteration, with P prompts, N seeds explored per prompt, K kept, F the FLOPs of one transformer forward of one
sample (``flops.forward_flops``), F_low the part of F the 4-bit explore copy runs in low precision, D the per-image
FLOPs of VAE decode + reward scoring (``flops.decode_and_score_flops``), R(p) = peak(p) × u × GPUs:

* explore    = P·N·S_explore·[F_low/R(p) + (F − F_low)/R(bf16)]  +  P·N·D/R(bf16)
               (p = the explore precision; for a full-precision explore F_low counts at R(bf16));
* regenerate = P·K·S_regen·F/R(bf16) + P·K·D/R(bf16)              (sol_rl only);
* update     = P·K·T·O·(f + b)·F/R(bf16), T training pairs per sample (the objective's: DiffusionNFT's
               round(timestep fraction × sampling steps) times, Flow-GRPO's trained SDE steps, AWM's stratified
               times), O optimizer steps
               (passes over the samples; official 1), f forwards per pair (the objective's: DiffusionNFT 3, v under θ
               with grad, v_old and v_ref without; Flow-GRPO 2, or 1 without its KL term; AWM 3, or 2 without its
               KL term to W0) and one backward costing b
               forwards (default 2: the usual 2× rule; with a frozen base the weight-gradient GEMMs are skipped, ~1×,
               but gradient checkpointing recomputes the forward, +1×).
* rollout = explore + regenerate; iteration = rollout + update. Quantizing the explore copy (once per
  iteration), text encoding (once per prompt), LoRA's own FLOPs (rank 32: < 1% of a forward) and the optimizer
  step are left out: each is well under a second at these sizes.

The families (docs/method.md): the baseline samples K seeds per prompt directly in BF16 (its "explore" is that
sampling, nothing is discarded); naive_scaling explores N in BF16 with the full step count; naive_quant explores N
in 4 bits with the full step count and trains on those; sol_rl explores N in 4 bits with the reduced step count and
regenerates the K selected in BF16.

4-bit on GPUs without NVFP4: the explore precision falls back the way ``explore.precision: auto`` does — FP8 where
the GPU has it (Hopper, Ada), else BF16 (emulated NVFP4 has no speed-up; its extra quantize–dequantize work is not
modeled). The result says which precision was used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from solrl_core.errors import SolrlError
from solrl_core.config.families import FAMILIES
from solrl_core.planner.flops import ForwardFlops
from solrl_core.planner.gpus import DEFAULT_UTILISATION, GPU
from solrl_core.rl.objectives import objective_for
from solrl_core.rl.selection import kept_per_prompt

FORWARDS_PER_TRAIN_STEP = 3
BACKWARD_FACTOR = 2.0


@dataclass(frozen=True)
class Shapes:
    """The per-iteration work of one family. ``seeds`` = samples drawn per prompt in the first sampling stage
    (N; K for the baseline); ``explore_precision`` is the requested precision ("bf16", "fp8", "nvfp4")."""

    family: str
    prompts: int = 48
    seeds: int = 96
    k: int = 24
    explore_steps: int = 10
    explore_precision: str = "bf16"
    explore_full_steps: int = 0  # explore steps at full precision (explore.full_precision_first + _last)
    explore_decode_fraction: float = 1.0  # the share of the full decode the explore's decode does (explore.decode)
    regenerate: bool = False
    regenerate_steps: int = 10
    train_timesteps: int = 6
    optimizer_steps: int = 1  # passes of the update over the same samples (train.optimizer_steps; official 1)
    forwards_per_train_step: int = FORWARDS_PER_TRAIN_STEP
    backward_factor: float = BACKWARD_FACTOR
    # forward-equivalents per trained (sample, time) pair that a model of experts sharded by FSDP2 adds: every call
    # of θ and θ_old runs every expert, an idle one on a stand-in row (solrl_core/models/experts.py `every_expert`)
    standin_forwards: float = 0.0

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise SolrlError(f"unknown family '{self.family}'; known: {', '.join(FAMILIES)}")
        if self.explore_precision not in ("bf16", "fp8", "nvfp4"):
            raise SolrlError(f"unknown explore precision '{self.explore_precision}'; known: bf16, fp8, nvfp4")
        if self.k > self.seeds:
            raise SolrlError(f"k ({self.k}) exceeds seeds per prompt ({self.seeds})")

    @property
    def trained_samples(self) -> int:
        return self.prompts * self.k


def official_shapes(family: str, timestep_fraction: float, *, prompts: int = 48, seeds: int = 96, k: int = 24,
                    explore_steps_sol: int = 6, steps: int = 10) -> Shapes:
    """The official per-iteration shapes of ``family`` (docs/method.md): 48 prompts, N = 96, K = 24, 10 sampling steps,
    6 NVFP4 explore steps for sol_rl, T = round(timestep_fraction × 10) training timesteps."""
    t = max(1, round(timestep_fraction * steps))
    common = dict(prompts=prompts, k=k, regenerate_steps=steps, train_timesteps=t)
    if family == "baseline":
        return Shapes(family, seeds=k, explore_steps=steps, explore_precision="bf16", **common)
    if family == "naive_scaling":
        return Shapes(family, seeds=seeds, explore_steps=steps, explore_precision="bf16", **common)
    if family == "naive_quant":
        return Shapes(family, seeds=seeds, explore_steps=steps, explore_precision="nvfp4", **common)
    if family == "sol_rl":
        return Shapes(family, seeds=seeds, explore_steps=explore_steps_sol, explore_precision="nvfp4",
                      regenerate=True, **common)
    raise SolrlError(f"unknown family '{family}'; known: {', '.join(FAMILIES)}")


_CONFIG_PRECISION = {
    "nvfp4": "nvfp4", "nvfp4_emulated": "nvfp4", "auto": "nvfp4",
    "fp8": "fp8", "fp8_emulated": "fp8", "bf16": "bf16", "fp32": "bf16",
}


def shapes_from_config(cfg, spec=None) -> Shapes:
    """The ``Shapes`` of a validated ``RunConfig`` (what the benchmark's modeled-GPU-cost axis uses). Emulated
    precisions map to the real ones they emulate, fp32 to bf16 (a GPU run would use bf16), auto to nvfp4 (resolved
    per GPU by ``resolve_precision``). ``spec``: the backbone spec it is priced on, when not the config's model's
    (the share of the decode the explore's does depends on its frames)."""
    from solrl_core.config.decode_plan import decode_fraction

    regen = bool(cfg.regenerate.enabled)
    sampling_steps = cfg.regenerate.steps if regen else cfg.explore.steps
    seeds = cfg.explore.seeds_per_prompt
    k = kept_per_prompt(cfg.select, seeds)
    objective = objective_for(cfg)
    return Shapes(
        family=cfg.family,
        prompts=cfg.prompts.per_iteration,
        seeds=seeds,
        k=min(k, seeds),
        explore_steps=cfg.explore.steps,
        explore_precision=_CONFIG_PRECISION[cfg.explore.precision],
        explore_full_steps=cfg.explore.full_precision_first + cfg.explore.full_precision_last,
        explore_decode_fraction=decode_fraction(cfg, spec),
        regenerate=regen,
        regenerate_steps=cfg.regenerate.steps,
        train_timesteps=objective.trained_times(sampling_steps),
        optimizer_steps=cfg.train.optimizer_steps,
        forwards_per_train_step=len(objective.forwards),
        standin_forwards=standin_forwards(cfg, objective, spec),
    )


def standin_forwards(cfg, objective, spec=None) -> float:
    """At most how many forward-equivalents per trained pair the stand-in rows of a sharded model of experts add:
    full fine-tuning over several processes (FSDP2) runs every expert on every call of θ and θ_old (not of the
    unsharded reference W0), each idle expert on one row, so a call of `train.micro_batch` rows adds up to
    (experts - 1) rows, each a forward (and a backward, under θ). At most: a micro-batch whose rows span every expert
    adds none."""
    from solrl_core.models.backbones.registry import kind_spec

    spec = spec or kind_spec(cfg.model.kind)
    tc = cfg.train
    sharded = tc.adapter == "full" and (tc.processes > 1 or tc.nodes > 1)
    if spec is None or len(spec.experts) < 2 or not sharded:
        return 0.0
    sharded_forwards = sum(1 for adapter in objective.forwards if adapter != "reference")
    return (len(spec.experts) - 1) / tc.micro_batch * (sharded_forwards + BACKWARD_FACTOR)


def resolve_precision(requested: str, gpu: GPU) -> str:
    """The precision the explore actually runs at on ``gpu``: nvfp4 → fp8 → bf16, as ``auto`` would fall back."""
    order = {"nvfp4": ("nvfp4", "fp8", "bf16"), "fp8": ("fp8", "bf16"), "bf16": ("bf16",)}[requested]
    return next(p for p in order if gpu.native(p))


@dataclass(frozen=True)
class Throughput:
    """Sustained FLOP/s of the whole job per precision: peak × utilisation × GPUs. ``per_precision`` (a
    calibration, ``planner.calibration``) replaces the utilisation of the precisions it names."""

    gpu: GPU
    gpus: int
    utilisation: float
    per_precision: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        if self.gpus < 1:
            raise SolrlError(f"gpus must be >= 1, got {self.gpus}")
        if not 0 < self.utilisation <= 1:
            raise SolrlError(f"utilisation must be in (0, 1], got {self.utilisation}")

    def rate(self, precision: str) -> float:
        peak = self.gpu.tflops(precision)
        if peak is None:
            raise SolrlError(f"{self.gpu.title} has no native {precision}")
        return peak * 1e12 * self.per_precision.get(precision, self.utilisation) * self.gpus


def forward_seconds(fwd: ForwardFlops, precision: str, tp: Throughput) -> float:
    """Seconds of one transformer forward of one sample: the low-precision share at ``precision``, the rest at bf16."""
    bf16 = tp.rate("bf16")
    if precision == "bf16":
        return fwd.total / bf16
    return fwd.low_precision / tp.rate(precision) + (fwd.total - fwd.low_precision) / bf16


def iteration_cost(fwd: ForwardFlops, shapes: Shapes, tp: Throughput, per_image_flops: float,
                   decode_flops: float = 0.0) -> dict:
    """Seconds per stage and per iteration (see the module docstring) and the FLOPs behind them. ``decode_flops``:
    the decode's part of ``per_image_flops``, of which the explore does ``shapes.explore_decode_fraction``."""
    precision = resolve_precision(shapes.explore_precision, tp.gpu)
    bf16 = tp.rate("bf16")
    n_explore = shapes.prompts * shapes.seeds
    n_kept = shapes.trained_samples
    low_steps = shapes.explore_steps - shapes.explore_full_steps
    explore_denoise = n_explore * (low_steps * forward_seconds(fwd, precision, tp)
                                   + shapes.explore_full_steps * fwd.total / bf16)
    explore_images = n_explore * (per_image_flops - (1 - shapes.explore_decode_fraction) * decode_flops) / bf16
    regen_denoise = n_kept * shapes.regenerate_steps * fwd.total / bf16 if shapes.regenerate else 0.0
    regen_images = n_kept * per_image_flops / bf16 if shapes.regenerate else 0.0
    train_forwards = (n_kept * shapes.train_timesteps * shapes.optimizer_steps
                      * (shapes.forwards_per_train_step + shapes.backward_factor + shapes.standin_forwards))
    update = train_forwards * fwd.total / bf16
    explore = explore_denoise + explore_images
    regenerate = regen_denoise + regen_images
    rollout = explore + regenerate
    return {
        "family": shapes.family,
        "shapes": asdict(shapes),
        "explore_precision": precision,
        "seconds": {
            "explore": explore,
            "explore_denoise": explore_denoise,
            "explore_decode_score": explore_images,
            "regenerate": regenerate,
            "regenerate_denoise": regen_denoise,
            "regenerate_decode_score": regen_images,
            "update": update,
            "rollout": rollout,
            "iteration": rollout + update,
        },
        "counts": {
            "explore_forwards": n_explore * shapes.explore_steps,
            "regenerate_forwards": n_kept * shapes.regenerate_steps if shapes.regenerate else 0,
            "train_forward_equivalents": train_forwards,
            "decoded_images": n_explore + (n_kept if shapes.regenerate else 0),
        },
    }


def family_costs(fwd: ForwardFlops, timestep_fraction: float, gpu: GPU, gpus: int = 8,
                 utilisation: float | None = None, per_image_flops: float = 0.0,
                 families: tuple[str, ...] = FAMILIES, per_precision: dict[str, float] | None = None,
                 **shape_overrides) -> dict[str, dict]:
    """``iteration_cost`` of each family at its official shapes (``shape_overrides`` replace Shapes fields;
    ``per_precision``: calibrated utilisations, see ``Throughput``)."""
    tp = Throughput(gpu, gpus, DEFAULT_UTILISATION if utilisation is None else utilisation, per_precision or {})
    out = {}
    for family in families:
        shapes = official_shapes(family, timestep_fraction)
        if shape_overrides:
            shapes = replace(shapes, **shape_overrides)
        out[family] = iteration_cost(fwd, shapes, tp, per_image_flops)
    return out


# ---------------------------------------------------------------------------------------------- plan


NFT_UPDATE = ("update = 3 forwards (v, v_old, v_ref) + 1 backward (= backward_factor forwards) per trained sample and "
              "training timestep; T = round(timestep fraction x 10)")


def update_assumption(objective) -> str:
    """The assumptions' line on the update of a run's objective (`rl.objectives`): its forwards and times."""
    if objective.name == "diffusionnft":
        return NFT_UPDATE
    n = len(objective.forwards)
    under = ", ".join({"default": "θ", "old": "θ_old", "reference": "W0"}.get(f, f) for f in objective.forwards)
    return (f"update ({objective.name}) = {n} forward{'s' if n != 1 else ''} (under {under}) + 1 backward "
            "(= backward_factor forwards) per trained sample and training time; T = the objective's training times "
            "per sample")


def assumptions(update: str = NFT_UPDATE) -> list[str]:
    """The plan's stated assumptions; `update`: the line on the update (`update_assumption` of another objective)."""
    return [
        "peak = published dense tensor-core TFLOPS (no sparsity); sustained = peak x utilisation, one number for "
        "every precision and stage",
        "FLOPs counted with torch FlopCounterMode on the meta-device diffusers model, one sample of the tokens "
        "above (matmuls, attention products, convolutions; elementwise work not counted)",
        "4-bit share = FLOPs of the layers the project's eligibility rule replaces (official skip names and min "
        "width); attention products and kept layers run in BF16",
        update,
        "decode + reward per sample: VAE decoder FLOPs + CLIP ViT-H/14 image tower on the image or on each frame of "
        "a video, in BF16",
        "not modeled: quantization of the explore copy, text encoding, LoRA FLOPs, optimizer step, communication, "
        "kernel-launch and host overheads",
    ]


def plan(model: str, gpu: str, family: str | None = None, gpus: int = 8, utilisation: float | None = None,
         *, config_directory=None, calibration=None) -> dict:
    """Predicted seconds per stage and per iteration of ``family`` (all four if None) for ``model`` ("flux1",
    "sd35l", "sd35m", "sana", ...) on ``gpus`` × ``gpu`` at the official per-iteration shapes.

    Unknown model, GPU or family → SolrlError with one line listing the known names. ``calibration``: a
    ``planner.calibration.Calibration`` (measured utilisation per precision, replacing ``utilisation``).
    """
    from solrl_core.planner.flops import decode_and_score_flops, forward_flops, get_model
    from solrl_core.planner.gpus import get_gpu

    m = get_model(model)
    g = get_gpu(gpu)
    if family is not None and family not in FAMILIES:
        raise SolrlError(f"unknown family '{family}'; known: {', '.join(FAMILIES)}")
    fwd = forward_flops(m.key, config_directory)
    per_image = decode_and_score_flops(m.key)
    u = DEFAULT_UTILISATION if utilisation is None else float(utilisation)
    families = FAMILIES if family is None else (family,)
    per_precision = calibration.per_precision() if calibration is not None else None
    costs = family_costs(fwd, m.timestep_fraction, g, gpus, u, per_image["total"], families, per_precision)
    result = plan_result(m.key, m.spec.title, m.note, g, gpus, u, utilisation is not None, m.timestep_fraction, fwd,
                         per_image, costs)
    return calibrated(result, calibration)


def calibrated(result: dict, calibration) -> dict:
    """``result`` marked as priced with ``calibration`` (None: unchanged)."""
    if calibration is None:
        return result
    from solrl_core.planner.calibration import assumption

    return {**result, "utilisation_source": f"calibrated ({calibration.source})",
            "calibration": calibration.to_dict(), "assumptions": [*result["assumptions"], assumption(calibration)]}


def plan_result(model: str, title: str, note: str | None, g: GPU, gpus: int, u: float, given: bool,
                timestep_fraction: float, fwd: ForwardFlops, per_image: dict, costs: dict,
                extra_assumptions: tuple[str, ...] = (), update: str = NFT_UPDATE) -> dict:
    """The plan as a plain dict (what `plan`, `config_plan.plan_config`, `format_plan` and --json share)."""
    return {
        "model": model,
        "title": title,
        "model_note": note,
        "gpu": g.key,
        "gpu_title": g.title,
        "gpu_tflops": {"bf16": g.bf16, "fp8": g.fp8, "nvfp4": g.nvfp4},
        "gpu_source": g.source,
        "gpus": gpus,
        "utilisation": u,
        "utilisation_source": "given" if given else "stated default",
        "timestep_fraction": timestep_fraction,
        "forward": fwd.to_dict(),
        "per_image_flops": per_image,
        "families": costs,
        "assumptions": [*assumptions(update), *extra_assumptions],
    }


def _s(x: float) -> str:
    """Seconds with a unit readable at any size (the embedded model's iterations take microseconds on a GPU)."""
    if x == 0:
        return "0 s"
    if x < 0.1:
        return f"{x * 1e3:.3g} ms" if x >= 1e-4 else f"{x * 1e6:.3g} µs"
    return f"{x:.1f} s" if x < 100 else f"{x:.0f} s"


def _flop(x: float, scale: float | None = None) -> str:
    """FLOPs in TFLOP, or MFLOP when `scale` (default x) is below 10 GFLOP."""
    return f"{x / 1e12:.2f} TFLOP" if (x if scale is None else scale) >= 1e10 else f"{x / 1e6:.1f} MFLOP"


def format_plan(result: dict) -> str:
    """A plan as readable text: the forward's FLOPs, one row per family (seconds per stage), the assumptions."""
    f = result["forward"]
    source = f"config '{result['config']}' ({result['config_family']}), " if result.get("config") else ""
    lines = [
        f"Cost plan: {source}{result['title']} on {result['gpus']} x {result['gpu_title']}, utilisation "
        f"{result['utilisation']:.2f} ({result['utilisation_source']})",
        f"  one forward, one sample at {f['resolution']} px ({f['image_tokens']} image + {f['text_tokens']} text "
        f"tokens): {_flop(f['total'])} = Linear {_flop(f['linear'], f['total'])} + attention "
        f"{_flop(f['attention'], f['total'])} + conv {_flop(f['conv'], f['total'])}; in 4 bits during explore: {100 * f['low_precision_share']:.1f}% "
        f"({f['low_precision_layers']} layers)",
        f"  decode + reward per sample: {_flop(result['per_image_flops']['total'])}; training timesteps per "
        f"sample: {next(iter(result['families'].values()))['shapes']['train_timesteps']} "
        f"(fraction {result['timestep_fraction']} of 10 steps)",
    ]
    if result.get("model_note"):
        lines.append(f"  note: {result['model_note']}")
    lines += [
        "",
        "| family | explore (precision, steps x seeds) | regenerate | update | rollout | iteration |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for fam, c in result["families"].items():
        s, sh = c["seconds"], c["shapes"]
        lines.append(
            f"| {fam}{' (this config)' if fam == result.get('config_family') else ''} | {_s(s['explore'])} "
            f"({c['explore_precision']}, {sh['explore_steps']} x {sh['seeds']}) | {_s(s['regenerate'])} | "
            f"{_s(s['update'])} | {_s(s['rollout'])} | {_s(s['iteration'])} |"
        )
    lines.append("")
    prompts = next(iter(result["families"].values()))["shapes"]["prompts"]
    lines.append(f"Seconds per RL iteration ({prompts} prompts). Assumptions:")
    lines += [f"  - {a}" for a in result["assumptions"]]
    if result.get("run"):
        from solrl_core.planner.run_total import format_run_totals

        lines += ["", format_run_totals(result["run"], result["gpus"], result["gpu_title"], result.get("config_family"))]
    if result.get("memory"):
        lines += ["", _memory_line(result["memory"])]
    if result.get("disk"):
        from solrl_core.planner.disk import DiskEstimate, format_disk

        lines += ["", format_disk(DiskEstimate.from_dict(result["disk"]))]
    return "\n".join(lines)


def _memory_line(memory: dict) -> str:
    """The config's per-GPU memory per stage (``config_plan.config_memory``) in one line."""
    def backend(b: dict) -> str:
        return b["name"] if b["impl"] in ("emulated", "torch") else f"{b['name']} through {b['impl']}"

    stages = ", ".join(f"{stage} {s['gib']:.1f}" for stage, s in memory["stages"].items())
    line = f"memory per GPU, GiB (explore in {backend(memory['explore_backend'])}): {stages}"
    other = memory.get("explore_without_te")
    if other:
        line += f"; explore in {backend(other['backend'])} {other['gib']:.1f}"
    line += f"; plus ~{memory['margin_gib']:.0f} GiB of CUDA context (the preflight's margin)"
    fit = memory.get("fit")
    if fit is None:
        return line
    card = f"{memory['gpu']} ({fit['memory_gib']:g} GiB)"
    if fit["fits"]:
        return line + f"\nfits on {card}: the largest stage, {fit['stage']}, needs ~{fit['gib']:.1f} GiB"
    return line + (f"\nDOES NOT FIT on {card}: the {fit['stage']} stage needs ~{fit['gib']:.1f} GiB + "
                   f"{memory['margin_gib']:.0f} GiB, {fit['over_gib']:.1f} GiB over; {fit['remedy']} (more GPUs do "
                   "not help: every GPU holds the whole model)")
