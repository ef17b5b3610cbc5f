"""How well the explore ranks what the regenerate samples, on the ODE and on Flow-GRPO's SDE, before and after the
SDE explore ran the regenerate's schedule (#43): one calibration batch (`planner.explore_policies.calibrate`) per
rollout kind, each policy against the regenerate setting (full precision, its steps).

Before, every Flow-GRPO sol_rl config explored at 6 steps and regenerated at 10: an SDE sample at 6 steps is another
image than at 10 (each step draws its own noise), so the explore ranked other samples than those trained on. Now an
SDE explore samples the regenerate's steps and differs by precision alone.

    python -m solrl_core.lab.explore_agreement configs/demo.yaml --prompts 16 --seeds 24 --out agreement.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

POLICIES = {  # label -> (precision, steps, full-precision first, last)
    "nvfp4 @ 6 (before: the ODE demo's and every SDE sol_rl preset's)": ("nvfp4_emulated", 6, 0, 0),
    "full precision @ 6 (the step budget alone)": ("fp32", 6, 0, 0),
    "nvfp4 @ 10 (the 4 bits alone; after, for SDE rollouts)": ("nvfp4_emulated", 10, 0, 0),
    "fp8 @ 10": ("fp8_emulated", 10, 0, 0),
    "nvfp4 @ 10, first and last step at full precision": ("nvfp4_emulated", 10, 1, 1),
}


def measure(config: str, overrides: list[str], prompts: int, seeds: int) -> dict:
    """Per rollout kind (ode, sde), each policy's within-prompt Spearman against the regenerate setting."""
    from solrl_core.config.loading import load_config
    from solrl_core.planner import explore_policies as ep

    out = {}
    regenerate = load_config(config, overrides).regenerate.steps
    for kind, extra in (("ode", []), ("sde", ["objective.name=flow_grpo", f"explore.steps={regenerate}"])):
        cfg = load_config(config, [*overrides, *extra])
        policies = [ep.ExplorePolicy(p, s, full_first=f, full_last=last) for p, s, f, last in POLICIES.values()]
        result = ep.calibrate(cfg, prompts, seeds, ("h100",), policies=policies)
        out[kind] = {label: {k: row[k] for k in ("spearman_within_prompt", "spearman_within_prompt_low",
                                                   "spearman_within_prompt_high", "kendall_within_prompt")}
                     for label, row in zip(POLICIES, result["rows"])}
        out[kind]["reference"] = result["reference"]["label"]
    return out


def format_table(result: dict) -> str:
    lines = ["| policy | ODE: Spearman within prompt [95%] | SDE (Flow-GRPO): Spearman within prompt [95%] |",
             "|---|---|---|"]
    for label in POLICIES:
        cells = [f"{r['spearman_within_prompt']:.3f} [{r['spearman_within_prompt_low']:.3f}, "
                 f"{r['spearman_within_prompt_high']:.3f}]" for r in (result["ode"][label], result["sde"][label])]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solrl_core.lab.explore_agreement",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=24)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = measure(args.config, args.set, args.prompts, args.seeds)
    print(format_table(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
