"""Where the explore proxy's ranking error comes from: one pool of seeds sampled under several explore settings.

The audit measures the fidelity of the configured explore (4-bit, few steps) against the full-precision regenerate
copy. This sweep splits that error into its causes by sampling the same prompts and seeds with the run config's base
model (W0, no adapters) under other settings — full precision with the explore's step count (the step budget alone),
4-bit with the regenerate step count (quantization alone), other formats, other solvers — and comparing each with the
reference setting (full precision, regenerate steps). Ranking fidelity is what selection depends on: Spearman and
Kendall within prompt groups (and pooled).

With ``--adapters CHECKPOINT_DIR`` the model is θ_old of that checkpoint instead, and the settings compare the two
ways the explore copy can carry it (`lora_settings`): W0 + θ_old merged and then quantized (``quant.lora_branch:
false``), and W0 quantized with θ_old's LoRA in high precision beside it (``quant.lora_branch: true``).

    python -m solrl_core.bench.fidelity_sweep configs/demo.yaml --prompts 16 --seeds 24 [--out sweep.json]
    python -m solrl_core.bench.fidelity_sweep configs/demo.yaml --adapters runs/demo/iter_0003/update/checkpoint
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from solrl_core.config.schema import RunConfig
from solrl_core.config.loading import load_config
from solrl_core.prompts import train_prompt_set
from solrl_core.models.quant.backends import apply_backend
from solrl_core.models.quant.linear import explore_rule
from solrl_core.models.quant.lora_branch import attach_lora_branches
from solrl_core.rewards.registry import score_images
from solrl_core.rl.fidelity import ranking_fidelity
from solrl_core.models.sampler import resolve_sampler, sample
from solrl_core.models.backbones.cache import load_backbone
from solrl_core.stages.checkpoints import attach_policy, load_adapters
from solrl_core.stages.transformer_copies import fresh_transformer


@dataclass(frozen=True)
class Setting:
    """One way of sampling the pool: explore precision, ODE steps, solver, and (4-bit) weight block layout."""

    precision: str
    steps: int
    sampler: str | None = None  # None: the backbone's default solver
    weight_format: str = "nvfp4_2d"
    min_width: int | None = None  # None: the run config's quant.min_width (or the backbone's default)
    label: str = ""
    lora: str = ""  # with adapters: "merged" (W0 + θ_old, then quantized), "branch" (LoRA beside the quantized W0)

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


def lora_settings(cfg: RunConfig) -> tuple[Setting, list[Setting]]:
    """(reference, compared) for a checkpoint's θ_old: merged re-quantization against the LoRA branch, and W0 alone
    (the LoRA dropped) for scale."""
    lo, hi = cfg.explore.steps, cfg.regenerate.steps
    reference = Setting("fp32", hi, lora="merged", label=f"reference: W0 + θ_old, fp32 @ {hi} steps")
    return reference, [
        Setting("nvfp4_emulated", lo, lora="merged", label=f"merged W0 + θ_old, re-quantized: nvfp4 @ {lo}"),
        Setting("nvfp4_emulated", lo, lora="branch", label=f"LoRA branch beside 4-bit W0: nvfp4 @ {lo}"),
        Setting("nvfp4_emulated", hi, lora="merged", label=f"merged W0 + θ_old, re-quantized: nvfp4 @ {hi}"),
        Setting("nvfp4_emulated", hi, lora="branch", label=f"LoRA branch beside 4-bit W0: nvfp4 @ {hi}"),
        Setting("nvfp4_emulated", lo, label=f"W0 alone (LoRA dropped): nvfp4 @ {lo}"),
    ]


def _model(cfg: RunConfig, setting: Setting, adapters: Path | None):
    """The base model's copy under `setting`: θ_old of `adapters` merged or as a branch (`setting.lora`)."""
    backbone = load_backbone(cfg)
    transformer = fresh_transformer(backbone)
    factors = None
    if setting.lora:
        if adapters is None:
            raise ValueError(f"setting {setting.name()!r} carries θ_old: give the checkpoint (adapters)")
        policy = attach_policy(cfg, backbone)
        load_adapters(policy, adapters)
        if setting.lora == "merged":
            transformer.load_state_dict(policy.merged_state_dict("old"))
        else:
            factors = policy.lora_factors("old")
    if setting.precision != "fp32":
        skip, width = explore_rule(cfg.quant, backbone.defaults)
        width = setting.min_width if setting.min_width is not None else width
        apply_backend(transformer, setting.precision, skip, width, weight_fmt=setting.weight_format,
                      act_fmt=cfg.quant.act_format)
    if factors is not None:
        attach_lora_branches(transformer, factors)
    return backbone, transformer


def sample_rewards(cfg: RunConfig, setting: Setting, prompts: list[str], prompt_index: np.ndarray,
                   seeds: np.ndarray, batch_size: int = 48, progress: bool = False,
                   adapters: Path | None = None) -> np.ndarray:
    """Training reward of each (prompt, seed) row sampled under `setting` by the base model, or by θ_old of the
    checkpoint `adapters` when the setting carries it."""
    backbone, transformer = _model(cfg, setting, adapters)
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
              settings: tuple[Setting, list[Setting]] | None = None, progress: bool = False,
              adapters: Path | None = None) -> dict:
    """Fidelity of every compared setting against the reference, on the same prompts (the first `num_prompts` of a
    seeded shuffle of the train set) and seeds. `adapters`: a checkpoint directory whose θ_old the settings with
    `lora` carry (default settings then: `lora_settings`)."""
    reference, compared = settings or (lora_settings(cfg) if adapters is not None else default_settings(cfg))
    prompts = train_prompt_set(cfg)
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(cfg.seed)).tolist()
    prompts = [prompts[i] for i in order[:num_prompts]]
    prompt_index = np.repeat(np.arange(len(prompts)), seeds_per_prompt)
    seeds = np.arange(len(prompt_index), dtype=np.int64) + 1_000_000 * (cfg.seed + 1)
    ref = sample_rewards(cfg, reference, prompts, prompt_index, seeds, progress=progress, adapters=adapters)
    rows = []
    for setting in compared:
        proxy = sample_rewards(cfg, setting, prompts, prompt_index, seeds, progress=progress, adapters=adapters)
        fid = ranking_fidelity(proxy, ref, prompt_index)
        rows.append({"setting": asdict(setting), "name": setting.name(), "mean_reward": float(np.mean(proxy)),
                     **{k: float(v) for k, v in fid.items()}})
    return {"reference": {"setting": asdict(reference), "name": reference.name(), "mean_reward": float(np.mean(ref))},
            "prompts": len(prompts), "seeds_per_prompt": seeds_per_prompt, "rows": rows,
            "adapters": str(adapters) if adapters is not None else None}


def format_sweep(result: dict) -> str:
    lines = [
        f"Ranking fidelity against {result['reference']['name']} "
        f"({result['prompts']} prompts x {result['seeds_per_prompt']} seeds, "
        f"{'θ_old of ' + result['adapters'] if result.get('adapters') else 'base model'})",
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
    parser.add_argument("--adapters", type=Path, metavar="CHECKPOINT_DIR",
                        help="compare merged re-quantization with the LoRA branch on this checkpoint's θ_old")
    parser.add_argument("--out", help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = run_sweep(load_config(args.config, args.set), args.prompts, args.seeds, progress=True,
                       adapters=args.adapters)
    print(format_sweep(result))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
