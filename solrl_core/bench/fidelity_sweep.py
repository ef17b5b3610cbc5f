"""Where the explore proxy's ranking error comes from: one pool of seeds sampled under several explore settings.

The audit measures the fidelity of the configured explore (4-bit, few steps) against the full-precision regenerate
copy. This sweep splits that error into its causes by sampling the same prompts and seeds with the run config's base
model (W0, no adapters) under other settings — full precision with the explore's step count (the step budget alone),
4-bit with the regenerate step count (quantization alone), other formats, other solvers — and comparing each with the
reference setting (full precision, regenerate steps). Ranking fidelity is what selection depends on: Spearman and
Kendall within prompt groups (and pooled).

    python -m solrl_core.bench.fidelity_sweep configs/demo.yaml --prompts 16 --seeds 24 [--out sweep.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from dataclasses import asdict, dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from solrl_core.config import RunConfig, load_config
from solrl_core.prompts import train_prompt_set
from solrl_core.quant.backends import apply_backend
from solrl_core.rewards.registry import score_images
from solrl_core.rl.fidelity import ranking_fidelity
from solrl_core.sampler import resolve_sampler, sample
from solrl_core.backbones.cache import load_backbone


@dataclass(frozen=True)
class Setting:
    """One way of sampling the pool: explore precision, ODE steps, solver, and (4-bit) weight block layout."""

    precision: str
    steps: int
    sampler: str | None = None  # None: the backbone's default solver
    weight_format: str = "nvfp4_2d"
    min_width: int | None = None  # None: the run config's quant.min_width (or the backbone's default)
    label: str = ""

    def name(self) -> str:
        return self.label or f"{self.precision} @ {self.steps} steps" + (f" ({self.sampler})" if self.sampler else "")


def default_settings(cfg: RunConfig) -> tuple[Setting, list[Setting]]:
    """(reference, compared): the reference is the regenerate copy; the others isolate one cause each."""
    lo, hi = cfg.explore.steps, cfg.regenerate.steps
    reference = Setting("fp32", hi, label=f"reference: fp32 @ {hi} steps")
    return reference, [
        Setting("fp32", lo, label=f"step budget alone: fp32 @ {lo}"),
        Setting("fp32", 2 * hi, label=f"reference's own error: fp32 @ {2 * hi}"),
        Setting("nvfp4_emulated", hi, label=f"NVFP4 alone: nvfp4 @ {hi}"),
        Setting("nvfp4_emulated", lo, label=f"explore as configured: nvfp4 @ {lo}"),
        Setting("nvfp4_emulated", lo, weight_format="nvfp4", label=f"nvfp4, 1x16 weight blocks @ {lo}"),
        Setting("nvfp4_emulated", lo, min_width=32, label=f"nvfp4 @ {lo}, min width 32"),
        Setting("fp8_emulated", lo, label=f"fp8 @ {lo}"),
        Setting("fp8_emulated", hi, label=f"fp8 @ {hi}"),
    ]


def sample_rewards(cfg: RunConfig, setting: Setting, prompts: list[str], prompt_index: np.ndarray,
                   seeds: np.ndarray, batch_size: int = 48, progress: bool = False) -> np.ndarray:
    """Training reward of each (prompt, seed) row sampled by the base model under `setting`."""
    backbone = load_backbone(cfg)
    transformer = copy.deepcopy(backbone.transformer).eval()
    if setting.precision != "fp32":
        quant = cfg.quant
        skip = quant.skip_names if quant.skip_names is not None else backbone.defaults.quant_skip_names
        width = quant.min_width if quant.min_width is not None else backbone.defaults.quant_min_width
        width = setting.min_width if setting.min_width is not None else width
        apply_backend(transformer, setting.precision, skip, width, weight_fmt=setting.weight_format,
                      act_fmt=quant.act_format)
    solver = setting.sampler or resolve_sampler(cfg.model.sampler, backbone)
    rewards = []
    for start in tqdm(range(0, len(seeds), batch_size), desc=setting.name(), disable=not progress, leave=False):
        rows = slice(start, start + batch_size)
        batch_prompts = [prompts[i] for i in prompt_index[rows]]
        noise = backbone.initial_noise(seeds[rows].tolist())
        x0 = sample(backbone, transformer, backbone.encode_prompts(batch_prompts), noise, setting.steps,
                    sampler=solver).x0
        rewards.append(score_images(backbone.decode(x0), batch_prompts, cfg.rewards, cfg.reward_models)[0])
    return np.concatenate(rewards)


def run_sweep(cfg: RunConfig, num_prompts: int, seeds_per_prompt: int,
              settings: tuple[Setting, list[Setting]] | None = None, progress: bool = False) -> dict:
    """Fidelity of every compared setting against the reference, on the same prompts (the first `num_prompts` of a
    seeded shuffle of the train set) and seeds."""
    reference, compared = settings or default_settings(cfg)
    prompts = train_prompt_set(cfg)
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(cfg.seed)).tolist()
    prompts = [prompts[i] for i in order[:num_prompts]]
    prompt_index = np.repeat(np.arange(len(prompts)), seeds_per_prompt)
    seeds = np.arange(len(prompt_index), dtype=np.int64) + 1_000_000 * (cfg.seed + 1)
    ref = sample_rewards(cfg, reference, prompts, prompt_index, seeds, progress=progress)
    rows = []
    for setting in compared:
        proxy = sample_rewards(cfg, setting, prompts, prompt_index, seeds, progress=progress)
        fid = ranking_fidelity(proxy, ref, prompt_index)
        rows.append({"setting": asdict(setting), "name": setting.name(), "mean_reward": float(np.mean(proxy)),
                     **{k: float(v) for k, v in fid.items()}})
    return {"reference": {"setting": asdict(reference), "name": reference.name(), "mean_reward": float(np.mean(ref))},
            "prompts": len(prompts), "seeds_per_prompt": seeds_per_prompt, "rows": rows}


def format_sweep(result: dict) -> str:
    lines = [
        f"Ranking fidelity against {result['reference']['name']} "
        f"({result['prompts']} prompts x {result['seeds_per_prompt']} seeds, base model)",
        "",
        "| setting | Spearman within prompt | Kendall within prompt | Spearman pooled | Kendall pooled | mean reward |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(f"| {row['name']} | {row['spearman_within_prompt']:.3f} | {row['kendall_within_prompt']:.3f} | "
                     f"{row['spearman']:.3f} | {row['kendall']:.3f} | {row['mean_reward']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=24)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = run_sweep(load_config(args.config, args.set), args.prompts, args.seeds, progress=True)
    print(format_sweep(result))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
