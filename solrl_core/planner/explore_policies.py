"""Explore policies and their calibration (`solrl calibrate-explore CONFIG`): which cheap sampler still ranks the
seeds as the full-precision regenerate would, and what it costs.

An explore policy is what the explore stage samples with: a precision (`explore.precision`), a step count
(`explore.steps`), full-precision first and last steps (`explore.full_precision_first/_last`, step-selective
precision: models/step_precision.py), a step cache from diffusers' hooks (`explore.cache`, models/step_cache.py)
and the model, the trained one or a sibling (`explore.sibling`: a smaller or step-distilled model sharing its latent
space and text encoders; sampled on its own schedule, with W0's place taken by its weights) and, for a video model,
how its samples are decoded to be scored (`explore.decode`: at a lower scale, or only the frames the rewards read;
config/decode_plan.py). An objective that
samples SDE rollouts (Flow-GRPO) keeps the regenerate's step count: its candidates vary only what keeps a seed's
sample (precision, full-precision steps, cache, sibling). The calibration
samples one batch of prompts × seeds with the config's base model (W0) under each candidate and under the reference
(the regenerate setting: full precision, `regenerate.steps`, no cache; with the objective's SDE when its rollouts
are SDE rollouts), and reports for each candidate:

* the within-prompt Spearman and Kendall of its rewards against the reference's (what selection depends on), and
  the overlap of the K/2 best and K/2 worst seeds per prompt it would keep with the reference's (`select.k`);
* the seconds it took here (real for steps and caches; a precision is emulated where this machine cannot run it);
* the modelled GPU seconds of the config's explore stage per GPU kind (the planner, `config_plan.plan_config`, at
  the policy's precision and steps), its denoising part scaled by the FLOPs the policy's model and cache leave of
  the trained model's (counted with torch's FlopCounterMode on one sampling run of each, at full precision), its
  decode the share the policy's decode does; `price_as` prices a full-size model's shapes, decode and reward instead
  (the embedded models' latent is the image: they decode nothing).

A candidate is on the Pareto front when no other is both cheaper (modelled on the first GPU kind) and ranks better.
`pick` chooses the cheapest candidate whose within-prompt Spearman reaches a threshold; `written_config` is the
config with that policy and the fidelity guardrail on, which keeps watching the policy during training.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from solrl_core.errors import ConfigError, SolrlError

DEFAULT_GPUS = ("h100", "b200")  # Hopper (no NVFP4) and Blackwell
FULL = "fp32"  # the explore precision that replaces nothing: the model in its own dtype
PRECISIONS = ("nvfp4", "fp8", FULL)
CACHE_CANDIDATES = (("none", {}), ("taylorseer", {"cache_interval": 2, "disable_cache_before_step": 2}))
FULL_STEP_CANDIDATES = ((1, 0), (0, 1), (1, 1))  # (first, last) steps at full precision
SEED_BASE = 7_000_000  # calibration seeds: far from the training and evaluation seeds of any run


@dataclass(frozen=True)
class ExplorePolicy:
    precision: str  # an explore precision name (models/quant/backends.py)
    steps: int
    cache: str = "none"
    cache_options: dict = field(default_factory=dict, hash=False, compare=False)
    sibling: str | None = None  # explore.sibling.path; None = the trained model
    full_first: int = 0  # explore.full_precision_first: its first steps at full precision
    full_last: int = 0  # explore.full_precision_last
    decode_scale: float = 1.0  # explore.decode.scale
    decode_frames: str = "all"  # explore.decode.frames

    def label(self) -> str:
        options = ", ".join(f"{k}={v}" for k, v in self.cache_options.items())
        cache = "" if self.cache == "none" else f" + {self.cache}({options})"
        model = "" if self.sibling is None else f"sibling {Path(self.sibling).name}, "
        full = ", ".join(f"{where} {n} at full precision" for where, n in (("first", self.full_first),
                                                                            ("last", self.full_last)) if n)
        decode = ", ".join(([f"decoded at {self.decode_scale:g} scale"] if self.decode_scale != 1.0 else [])
                           + (["the scored frames decoded"] if self.decode_frames != "all" else []))
        notes = ", ".join(n for n in (full, decode) if n)
        return (f"{model}{'full precision' if self.precision == FULL else self.precision} @ {self.steps}{cache}"
                + (f" ({notes})" if notes else ""))

    def decode_config(self):
        """Its `explore.decode`."""
        from solrl_core.config.schema import ExploreDecodeConfig

        return ExploreDecodeConfig(frames=self.decode_frames, scale=self.decode_scale)

    def decode_plan(self, cfg):
        """How it decodes the config's samples (`explore_decode.decode_plan`)."""
        from solrl_core.config.decode_plan import decode_plan

        return decode_plan(cfg.model_copy(update={"explore": cfg.explore.model_copy(
            update={"decode": self.decode_config()})}))

    def short_label(self) -> str:
        """For a plot: "sib:" with a sibling, the precision without "_emulated", the steps, "+cache" with a cache,
        "+f1" / "+l1" for full-precision first / last steps, "+d0.5" for a decode at half scale, "+dF" for the
        scored frames decoded alone."""
        precision = "full" if self.precision == FULL else self.precision.removesuffix("_emulated")
        return (("" if self.sibling is None else "sib:") + f"{precision}@{self.steps}"
                + ("" if self.cache == "none" else f"+{self.cache}")
                + (f"+f{self.full_first}" if self.full_first else "")
                + (f"+l{self.full_last}" if self.full_last else "")
                + (f"+d{self.decode_scale:g}" if self.decode_scale != 1.0 else "")
                + ("+dF" if self.decode_frames != "all" else ""))

    def overrides(self) -> list[str]:
        """The config keys that set this policy (`--set` form)."""
        return [f"explore.precision={self.precision}", f"explore.steps={self.steps}",
                f"explore.full_precision_first={self.full_first}", f"explore.full_precision_last={self.full_last}",
                f"explore.cache.kind={self.cache}", f"explore.cache.options={json.dumps(self.cache_options)}",
                f"explore.sibling.path={json.dumps(self.sibling)}", f"explore.decode.scale={self.decode_scale}",
                f"explore.decode.frames={self.decode_frames}"]


def runnable_precision(name: str, device: str) -> str:
    """`name` as this machine runs it: the real backend where it can, else its emulation (the same numerics)."""
    from solrl_core.models.quant.backends import resolve_backend

    if name == FULL:
        return FULL
    try:
        return resolve_backend(name, device).name
    except SolrlError:
        return f"{name}_emulated"


def candidate_policies(cfg, siblings: tuple[str, ...] = ()) -> list[ExplorePolicy]:
    """precision (4-bit, 8-bit, full) × steps (half the explore's, the explore's, between it and the regenerate's,
    the regenerate's) × cache (none, TaylorSeer every other step from step 2); the 4- and 8-bit ones also with their
    first, last, or first and last step at full precision (FULL_STEP_CANDIDATES); without the reference itself; and
    for each sibling precision × a few steps (1, 2, 4, the explore's), without a cache. SDE rollouts (Flow-GRPO) keep
    the regenerate's steps: every candidate samples them."""
    from solrl_core.config.checks import rollout_noise_level

    lo, hi = cfg.explore.steps, cfg.regenerate.steps
    same_sample = rollout_noise_level(cfg) > 0 and cfg.regenerate.enabled
    steps = [hi] if same_sample else sorted({max(1, lo // 2), lo, (lo + hi) // 2, hi})
    device = cfg.model.device
    policies = [ExplorePolicy(runnable_precision(p, device), s, kind, dict(options))
                for p in PRECISIONS for s in steps for kind, options in CACHE_CANDIDATES
                if not (kind != "none" and s < 4)]  # a cache needs steps to skip after its warm-up
    policies += [ExplorePolicy(runnable_precision(p, device), s, full_first=first, full_last=last)
                 for p in PRECISIONS if p != FULL for s in steps for first, last in FULL_STEP_CANDIDATES
                 if s > first + last + 1]  # at least two steps left in low precision
    policies += [ExplorePolicy(runnable_precision(p, device), s, sibling=sibling)
                 for sibling in siblings for p in PRECISIONS
                 for s in ([hi] if same_sample else sorted({1, 2, 4, lo})) if s <= hi]
    policies += decode_policies(cfg, [hi] if same_sample else [lo])
    reference = reference_policy(cfg)
    return [p for p in policies if p != reference and family_accepts(cfg, p)]


DECODE_SCALE_CANDIDATE = 0.5  # a quarter of the decode's work


def decode_policies(cfg, steps: list[int]) -> list[ExplorePolicy]:
    """For a video model (whose decode may cost more than its 4-bit denoising): each precision at `steps` with a
    cheaper decode: at half scale, the scored frames alone where that decodes fewer (`explore.decode`), and both."""
    from solrl_core.models.backbones.registry import kind_spec

    spec = kind_spec(cfg.model.kind)
    if spec is None or spec.defaults.frames is None:
        return []
    decodes = [(DECODE_SCALE_CANDIDATE, "all")]
    if spec.causal_decoder and ExplorePolicy(FULL, 1, decode_frames="scored").decode_plan(cfg).latent_frames:
        decodes += [(1.0, "scored"), (DECODE_SCALE_CANDIDATE, "scored")]
    device = cfg.model.device
    return [ExplorePolicy(runnable_precision(p, device), s, decode_scale=scale, decode_frames=frames)
            for p in PRECISIONS for s in steps for scale, frames in decodes]


def family_accepts(cfg, policy: ExplorePolicy) -> bool:
    """Whether the config's family may explore with `policy` (naive_quant in low precision, naive_scaling and
    the baseline at full precision, sol_rl cheaper than its regenerate: `config.families`)."""
    try:
        with_overrides(cfg, policy.overrides())
    except ConfigError:
        return False
    return True


def reference_policy(cfg) -> ExplorePolicy:
    """The regenerate setting: full precision, its steps, no cache."""
    return ExplorePolicy(FULL, cfg.regenerate.steps)


def policy_backbone(cfg, policy: ExplorePolicy):
    """The backbone `policy` samples on: the config's, or its view with the policy's sibling (cached per process)."""
    from solrl_core.models.backbones.base import sibling_errors
    from solrl_core.models.backbones.cache import load_backbone, load_sibling

    if policy.sibling is None:
        return load_backbone(cfg)
    with sibling_errors():
        return load_sibling(cfg, policy.sibling)


def policy_transformer(backbone, cfg, policy: ExplorePolicy) -> torch.nn.Module:
    """A copy of `backbone`'s transformer (`policy_backbone`) under `policy` that shares its weights
    (`weight_sharing_transformer`: the quantized layers are new modules, the others cost no memory): its eligible
    layers in the policy's precision (the config's quantization rule), its step cache enabled."""
    from solrl_core.models.quant.backends import apply_backend
    from solrl_core.models.quant.linear import explore_rule
    from solrl_core.models.step_cache import enable_step_cache
    from solrl_core.models.step_precision import StepSelective
    from solrl_core.stages.transformer_copies import weight_sharing_transformer

    transformer = weight_sharing_transformer(backbone)
    if policy.precision != FULL:
        quant = cfg.quant
        apply_backend(transformer, policy.precision, *explore_rule(quant, backbone.defaults),
                      weight_fmt=quant.weight_format, act_fmt=quant.act_format)
    transformer = enable_step_cache(transformer, policy.cache, policy.cache_options)
    if policy.full_first or policy.full_last:  # the full-precision steps on the model itself (its weights)
        return StepSelective(transformer, weight_sharing_transformer(backbone), policy.full_first, policy.full_last)
    return transformer


@dataclass
class Batch:
    """The calibration batch: prompts, each row's prompt and seed; the conditioning of its rows, encoded once for
    every policy that samples them."""

    prompts: list[str]
    prompt_index: np.ndarray
    seeds: np.ndarray
    sources: list[tuple[str, ...]] | None = None  # edit prompts' source image paths, per prompt
    encoded: dict = field(default_factory=dict, repr=False)  # (start, stop, unconditional) -> conditioning
    sized: dict = field(default_factory=dict, repr=False)  # (height, width) -> every prompt's sources at that size

    def conditioning(self, backbone, start: int, stop: int, unconditional: bool = False):
        """The rows' conditioning (`unconditional`: the empty prompt's, an edit prompt's with its row's sources)."""
        if (start, stop, unconditional) not in self.encoded:
            rows = self.prompt_index[start:stop]
            texts = [""] * len(rows) if unconditional else [self.prompts[i] for i in rows]
            if self.sources is None:
                self.encoded[start, stop, unconditional] = backbone.encode_prompts(texts[:1] if unconditional
                                                                                   else texts)
            else:
                from solrl_core.edit_sources import load_images

                images = [load_images(self.sources[i]) for i in rows]
                self.encoded[start, stop, unconditional] = backbone.encode_prompts(texts, images)
        return self.encoded[start, stop, unconditional]

    def source_images(self, start: int, stop: int, height: int, width: int) -> np.ndarray | None:
        """The rows' source images at the generated size (B, sources, H, W, 3), for the rewards that score edits."""
        if self.sources is None:
            return None
        if (height, width) not in self.sized:  # read once, for every batch and policy
            from solrl_core.edit_sources import source_array

            self.sized[height, width] = source_array(self.sources, height, width)
        return self.sized[height, width][self.prompt_index[start:stop]]


def calibration_batch(cfg, num_prompts: int, seeds_per_prompt: int, seed_offset: int = 0) -> Batch:
    """The first `num_prompts` prompts of a seeded shuffle of the train set, `seeds_per_prompt` seeds each; another
    `seed_offset` gives fresh seeds for the same prompts."""
    from solrl_core.prompts import train_prompt_set, train_sources

    prompts, sources = train_prompt_set(cfg), train_sources(cfg)
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(cfg.seed)).tolist()
    chosen = [prompts[i] for i in order[:num_prompts]]
    index = np.repeat(np.arange(len(chosen)), seeds_per_prompt)
    seeds = SEED_BASE + seed_offset + np.arange(len(index), dtype=np.int64)
    return Batch(chosen, index, seeds, None if sources is None else [sources[i] for i in order[:num_prompts]])


def sample_rewards(cfg, backbone, transformer, policy: ExplorePolicy, batch: Batch, batch_size: int,
                   progress: bool = False) -> tuple[np.ndarray, float]:
    """(the training reward of every row sampled under `policy` by `transformer`, the seconds sampling took), on the
    ODE, or on the run objective's SDE when its rollouts are SDE rollouts (explore and regenerate alike)."""
    from tqdm.auto import tqdm

    from solrl_core.models.explore_decode import decode_samples
    from solrl_core.models.sampler import resolve_sampler, sample
    from solrl_core.models.sde_sampler import sample_sde
    from solrl_core.rewards.registry import score_images
    from solrl_core.rl.objectives import objective_for

    objective = objective_for(cfg)
    plan = policy.decode_plan(cfg)
    noise_level = objective.sampling_noise_level()
    guidance = cfg.guidance.rollout
    guided = guidance != 1.0 and not backbone.defaults.distilled_guidance
    solver = resolve_sampler(cfg.model.sampler, backbone)
    rewards, seconds = [], 0.0
    for start in tqdm(range(0, len(batch.seeds), batch_size), desc=policy.label(), disable=not progress,
                      leave=False):
        rows = slice(start, start + batch_size)
        texts = [batch.prompts[i] for i in batch.prompt_index[rows]]
        cond = batch.conditioning(backbone, start, start + batch_size)
        uncond = batch.conditioning(backbone, start, start + batch_size, unconditional=True) if guided else None
        seeds = batch.seeds[rows].tolist()
        began = time.perf_counter()
        if noise_level > 0:
            x0 = sample_sde(backbone, transformer, cond, seeds, policy.steps, noise_level,
                            objective.sde_window(policy.steps), guidance=guidance, uncond=uncond).x0
        else:
            x0 = sample(backbone, transformer, cond, backbone.initial_noise(seeds), policy.steps, sampler=solver,
                        guidance=guidance, uncond=uncond).x0
        images = decode_samples(backbone, x0, plan)  # reads the samples back: the sampling time is complete
        seconds += time.perf_counter() - began
        sources = batch.source_images(start, start + batch_size, *images.shape[-3:-1])
        rewards.append(score_images(images, texts, cfg.rewards, cfg.reward_models, sources)[0])
    return np.concatenate(rewards), seconds


def sampling_flops(backbone, transformer, steps: int) -> int:
    """The FLOPs (torch's FlopCounterMode: matmuls, attention, convolutions) of one `steps`-step sampling run of one
    sample through `transformer`: what a cache leaves of the forwards."""
    from torch.utils.flop_counter import FlopCounterMode

    from solrl_core.models.sampler import sample
    from solrl_core.prompts import CALIBRATION_PROMPT

    cond = backbone.encode_prompts([CALIBRATION_PROMPT])
    with FlopCounterMode(display=False) as counter:
        sample(backbone, transformer, cond, backbone.initial_noise([0]), steps)
    return counter.get_total_flops()


def flop_ratio(cfg, policy: ExplorePolicy) -> float:
    """The share of the trained model's sampling FLOPs at `policy`'s steps that `policy`'s model and cache leave:
    counted on full-precision copies (the precision changes no matmul count, and real low-precision kernels may
    escape the counter)."""
    if policy.cache == "none" and policy.sibling is None:
        return 1.0
    full = ExplorePolicy(FULL, policy.steps)
    own = ExplorePolicy(FULL, policy.steps, policy.cache, policy.cache_options, policy.sibling)
    backbone, source = policy_backbone(cfg, full), policy_backbone(cfg, own)
    return (sampling_flops(source, policy_transformer(source, cfg, own), policy.steps)
            / sampling_flops(backbone, policy_transformer(backbone, cfg, full), policy.steps))


def modelled_seconds(cfg, policy: ExplorePolicy, gpus: tuple[str, ...], flop_ratio: float,
                     forward=None, price_as: str | None = None) -> dict[str, float]:
    """GPU kind -> modelled seconds of the config's explore stage under `policy` (the planner, as `solrl plan`
    prices it on 8 GPUs), its denoising part times `flop_ratio` (what the policy's model and cache leave), its decode
    the share the policy's decode does. `forward`: the config's `config_plan.config_forward` (of `price_as`, a
    full-size model to price on instead), computed once for every policy (None: computed here)."""
    from solrl_core.planner.config_plan import config_forward, priced_spec
    from solrl_core.planner.cost_model import Throughput, iteration_cost, shapes_from_config
    from solrl_core.planner.gpus import DEFAULT_UTILISATION, get_gpu

    fwd, per_image, _, _ = forward or config_forward(cfg, price_as)
    explore = cfg.explore.model_copy(update={"precision": policy.precision, "steps": policy.steps,
                                             "full_precision_first": policy.full_first,
                                             "full_precision_last": policy.full_last,
                                             "decode": policy.decode_config()})
    # the reference too, any family
    shapes = shapes_from_config(cfg.model_copy(update={"explore": explore}), priced_spec(price_as))
    out = {}
    for gpu in gpus:
        seconds = iteration_cost(fwd, shapes, Throughput(get_gpu(gpu), 8, DEFAULT_UTILISATION),
                                 per_image["total"], per_image.get("decode", 0.0))["seconds"]
        out[gpu] = seconds["explore_denoise"] * flop_ratio + seconds["explore_decode_score"]
    return out


def calibrate(cfg, num_prompts: int = 16, seeds_per_prompt: int = 24, gpus: tuple[str, ...] = DEFAULT_GPUS,
              policies: list[ExplorePolicy] | None = None, batch_size: int = 48, seed_offset: int = 0,
              progress: bool = False, siblings: tuple[str, ...] = (), keep: Path | None = None,
              say=None, price_as: str | None = None) -> dict:
    """Every candidate policy (`candidate_policies(cfg, siblings)` unless `policies`) against the reference on one
    calibration batch (module docstring), as a plain dict. `keep`: a folder where each policy's rewards are kept once
    measured and read back by a calibration of the same batch (calibration_store.py: a stopped one resumes); `say`:
    called with one line per policy done ("policy 3 of 9: ..."); `price_as`: a full-size model whose shapes, decode
    and reward the modelled seconds are of (the embedded models decode nothing: their latent is the image)."""
    from solrl_core.planner.calibration_store import MeasuredRewards, batch_key
    from solrl_core.rl.fidelity import ranking_fidelity, within_prompt_pairs
    from solrl_core.stages.audit import extremes_overlap

    say = say or (lambda line: None)
    measured = MeasuredRewards(keep, batch_key(cfg, num_prompts, seeds_per_prompt, seed_offset, batch_size))
    candidates = policies if policies is not None else candidate_policies(cfg, siblings)
    reference = reference_policy(cfg)
    backbone = policy_backbone(cfg, reference)
    batch = calibration_batch(cfg, num_prompts, seeds_per_prompt, seed_offset)

    def rewards_of(policy: ExplorePolicy, source) -> tuple[np.ndarray, float, bool]:
        """(rewards, seconds, measured before)"""
        before = measured.get(policy)
        if before is not None:
            return *before, True
        rewards, seconds = sample_rewards(cfg, source, policy_transformer(source, cfg, policy), policy, batch,
                                          batch_size, progress)
        measured.put(policy, rewards, seconds)
        return rewards, seconds, False

    ref_rewards, ref_seconds, kept = rewards_of(reference, backbone)
    say(f"reference {reference.label()}: mean reward {ref_rewards.mean():.4f} "
        + ("(measured before)" if kept else f"({ref_seconds:.1f} s)"))
    from solrl_core.planner.config_plan import config_forward

    half = max(1, cfg.select.k // 2)
    forward = config_forward(cfg, price_as)
    ratios: dict[tuple, float] = {}  # (cache, options, steps, sibling) -> the FLOPs it leaves, whatever the precision
    rows = []
    for number, policy in enumerate(candidates, 1):
        rewards, seconds, kept = rewards_of(policy, policy_backbone(cfg, policy))
        key = (policy.cache, json.dumps(policy.cache_options, sort_keys=True), policy.steps, policy.sibling)
        if key not in ratios:
            ratios[key] = flop_ratio(cfg, policy)
        ratio = ratios[key]
        fid = ranking_fidelity(rewards, ref_rewards, batch.prompt_index)
        low, high = prompt_interval([s for s, _ in within_prompt_pairs(rewards, ref_rewards, batch.prompt_index)])
        rows.append({"policy": asdict(policy), "label": policy.label(), "seconds_here": seconds,
                     "spearman_within_prompt_low": low, "spearman_within_prompt_high": high,
                     "flop_ratio": ratio, "modelled_seconds": modelled_seconds(cfg, policy, gpus, ratio, forward, price_as),
                     "mean_reward": float(rewards.mean()),
                     **{k: float(v) for k, v in fid.items()},
                     **extremes_overlap(rewards, ref_rewards, batch.prompt_index, half)})
        say(f"policy {number} of {len(candidates)}: {policy.label()}: Spearman within prompt "
            f"{rows[-1]['spearman_within_prompt']:.3f} " + ("(measured before)" if kept else f"({seconds:.1f} s)"))
    mark_pareto(rows, gpus[0])
    return {"config": cfg.name, "family": cfg.family, "objective": cfg.objective.name, "device": cfg.model.device,
            "prompts": len(batch.prompts), "seeds_per_prompt": seeds_per_prompt, "seed_offset": seed_offset,
            "k": cfg.select.k, "gpus": list(gpus), "priced_as": price_as,
            "reference": {"policy": asdict(reference), "label": reference.label(), "seconds_here": ref_seconds,
                          "mean_reward": float(ref_rewards.mean())},
            "rows": rows}


def prompt_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Student's t interval of the mean of the per-prompt coefficients (prompts are the independent units: a
    coefficient from 16 prompts moves by several hundredths with other seeds), cut to [-1, 1]; NaN with fewer than
    2."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return float("nan"), float("nan")
    half = stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(max(x.mean() - half, -1.0)), float(min(x.mean() + half, 1.0))  # a coefficient's own range


def mark_pareto(rows: list[dict], gpu: str) -> None:
    """Set each row's `pareto`: no other row is at most as costly on `gpu` and ranks at least as well, one of the
    two strictly."""
    def key(r):
        return r["modelled_seconds"][gpu], -r["spearman_within_prompt"]

    for r in rows:
        cost, neg = key(r)
        r["pareto"] = not any(key(o)[0] <= cost and key(o)[1] <= neg and key(o) != (cost, neg) for o in rows)


def pick(result: dict, min_spearman: float, gpu: str | None = None) -> dict | None:
    """The cheapest row on `gpu` (default the first priced) whose within-prompt Spearman reaches `min_spearman` with
    95% confidence (the lower end of its interval over prompts; ties: the better ranking), or None when none does."""
    gpu = gpu or result["gpus"][0]
    if gpu not in result["gpus"]:
        raise SolrlError(f"--gpu {gpu} was not priced (priced: {', '.join(result['gpus'])})")
    good = [r for r in result["rows"] if r["spearman_within_prompt_low"] >= min_spearman]
    return min(good, key=lambda r: (r["modelled_seconds"][gpu], -r["spearman_within_prompt"]), default=None)


def format_table(result: dict, chosen: dict | None = None) -> str:
    gpus = result["gpus"]
    head = ("| policy | Spearman within prompt [95% over prompts] | Kendall within prompt | top-K/2 overlap | "
            "bottom-K/2 overlap | "
            "seconds here | FLOPs left (model, cache) | " + " | ".join(f"modelled s on {g}" for g in gpus)
            + " | Pareto |")
    lines = [f"Calibration of {result['config']} ({result['family']}, {result['objective']}): {result['prompts']} "
             f"prompts × {result['seeds_per_prompt']} seeds on {result['device']}, against the reference "
             f"{result['reference']['label']} ({result['reference']['seconds_here']:.2f} s here)"
             + (f"; modelled seconds of {result['priced_as']} at its own shapes" if result.get("priced_as") else ""),
             "", head,
             "|" + "---|" + "---:|" * (6 + len(gpus)) + "---|"]
    for r in sorted(result["rows"], key=lambda r: r["modelled_seconds"][gpus[0]]):
        mark = " **chosen**" if chosen is not None and r["label"] == chosen["label"] else ""
        lines.append(
            f"| {r['label']}{mark} | {r['spearman_within_prompt']:.3f} [{r['spearman_within_prompt_low']:.3f}, "
            f"{r['spearman_within_prompt_high']:.3f}] | {r['kendall_within_prompt']:.3f} | "
            f"{r['topk_overlap']:.2f} | {r['bottomk_overlap']:.2f} | {r['seconds_here']:.2f} | {r['flop_ratio']:.2f} | "
            + " | ".join(f"{r['modelled_seconds'][g]:.3g}" for g in gpus) + f" | {'yes' if r['pareto'] else ''} |")
    return "\n".join(lines)


def plot(result: dict, path: str | Path, chosen: dict | None = None, min_spearman: float | None = None) -> Path:
    """A PNG: each policy's within-prompt Spearman against its modelled explore seconds on the first GPU kind,
    labelled, the Pareto front joined, the threshold and the chosen policy marked."""
    from matplotlib.figure import Figure

    gpu = result["gpus"][0]
    fig = Figure(figsize=(8, 5), dpi=110)
    ax = fig.subplots()
    for r in result["rows"]:
        x, y = r["modelled_seconds"][gpu], r["spearman_within_prompt"]
        color = "tab:blue" if r["pareto"] else "tab:gray"
        ax.errorbar([x], [y], yerr=[[y - r["spearman_within_prompt_low"]], [r["spearman_within_prompt_high"] - y]],
                    fmt="o", color=color, ms=4, lw=0.8, capsize=2, zorder=3)
        ax.annotate(ExplorePolicy(**r["policy"]).short_label(), (x, y), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    front = sorted((r["modelled_seconds"][gpu], r["spearman_within_prompt"]) for r in result["rows"] if r["pareto"])
    if front:
        ax.plot(*zip(*front), color="tab:blue", lw=1, label="Pareto front")
    if min_spearman is not None:
        ax.axhline(min_spearman, color="tab:red", lw=0.8, ls="--", label=f"threshold {min_spearman:g}")
    if chosen is not None:
        ax.scatter([chosen["modelled_seconds"][gpu]], [chosen["spearman_within_prompt"]], s=120, facecolors="none",
                   edgecolors="tab:red", zorder=4, label=f"chosen: {chosen['label']}")
    ax.set_xlabel(f"modelled explore seconds per iteration on {gpu} (planner)")
    ax.set_ylabel("Spearman within prompt vs reference (95% over prompts)")
    ax.set_title(f"explore policies of {result['config']} vs {result['reference']['label']}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    return path


def written_config(cfg, chosen: dict) -> str:
    """The YAML of `cfg` with the chosen policy, the run name `<name>_calibrated` and the fidelity guardrail on (where
    a regenerate stage gives it something to watch), resolved (every key, no `extends`)."""
    from solrl_core.config.schema import dump_config

    policy = ExplorePolicy(**chosen["policy"])
    overrides = [*policy.overrides(), f"name={cfg.name}_calibrated"]  # its own run directory
    if cfg.regenerate.enabled:
        overrides.append("explore.guardrail.enabled=true")
        from solrl_core.config.checks import rollout_noise_level

        if rollout_noise_level(cfg) > 0:  # SDE rollouts: every rung on the regenerate's steps
            steps = cfg.regenerate.steps
            overrides.append(f"explore.guardrail.ladder=[[fp8_emulated, {steps}], [fp32, {steps}]]")
    return dump_config(with_overrides(cfg, overrides))


def with_overrides(cfg, overrides: list[str]):
    """`cfg` with `--set` overrides applied, validated again."""
    from solrl_core.config.loading import load_config_text
    from solrl_core.config.schema import dump_config

    return load_config_text(dump_config(cfg), overrides, source=cfg.name)
