"""`solrl distill-reward`: the embedded world's learned reward, distilled from the programmatic one."""

from __future__ import annotations

import json


def cmd_distill_reward(args) -> int:
    from solrl_core.userfiles import check_output_dir

    check_output_dir(args.out, "--out")  # before the distillation, not after it
    from solrl_core.lab.embedded_distill import DEFAULT_RECIPE, distill

    recipe = {key: value for key, value in (("epochs", args.epochs), ("seed", args.seed)) if value is not None}
    summary = distill(args.out, recipe, progress=not args.quiet)
    shown = {k: v for k, v in summary.items() if k not in ("vocabulary", "loss_curve")}
    print(json.dumps(shown, indent=2))
    print(f"learned reward in {args.out}: use it with reward_models.embedded_learned.path={args.out} "
          f"(defaults: {DEFAULT_RECIPE['epochs']} epochs, seed {DEFAULT_RECIPE['seed']})")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "distill-reward", help="train the embedded world's learned reward (reproduces the shipped scorer)",
        description="Distil the programmatic `embedded` reward into a small image-text scorer, as preference models "
        "(PickScore, HPS) are learned from labelled images: samples of the pretrained embedded model and rendered "
        "scenes of the training prompts, each labelled with its gold reward for its own and for other prompts. "
        "Writes model.safetensors and scorer.json (recipe, agreement with gold on the held-out prompts). The "
        "defaults reproduce solrl_core/models/embedded/scorer/, the `embedded_learned` reward.")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--epochs", type=int, default=None, help="passes over the data (default: the shipped scorer's)")
    p.add_argument("--seed", type=int, default=None, help="seed of the samples, renders and initial weights")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_distill_reward)
