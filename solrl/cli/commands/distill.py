"""`solrl distill-reward`: the embedded world's learned reward, distilled from the programmatic one; `solrl
distill-sibling`: a few-step sibling of the embedded model to explore with."""

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


def cmd_distill_sibling(args) -> int:
    from solrl_core.userfiles import check_output_dir

    check_output_dir(args.out, "--out")
    from solrl_core.lab.embedded_sibling import DEFAULT_RECIPE, distill_sibling

    given = (("steps", args.steps), ("seeds_per_prompt", args.seeds_per_prompt), ("seed", args.seed))
    summary = distill_sibling(args.out, {k: v for k, v in given if v is not None}, progress=not args.quiet)
    print(json.dumps({k: v for k, v in summary.items() if k != "loss_curve"}, indent=2))
    print(f"sibling in {args.out}: calibrate it with solrl calibrate-explore CONFIG --sibling {args.out}, or explore "
          f"with it: --set explore.sibling.path={args.out} (defaults: {DEFAULT_RECIPE['steps']} steps)")
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
    q = sub.add_parser(
        "distill-sibling", help="distil a few-step sibling of the embedded model, to explore with (explore.sibling)",
        description="One round of reflow: the shipped embedded model samples (noise, sample) pairs of the training "
        "prompts at the regenerate's steps, and a copy of it learns the straight path between them, so that it "
        "samples in 1 to 4 steps. Same architecture, text encoder and latent space: what FLUX.1-schnell is to "
        "FLUX.1-dev. Writes an embedded model directory whose solrl_embedded.json holds the recipe, the loss curve "
        "and the student's and teacher's fidelity at 1, 2, 4 steps on held-out seeds.")
    q.add_argument("--out", required=True, help="output directory")
    q.add_argument("--steps", type=int, default=None, help="optimizer steps (default 2000)")
    q.add_argument("--seeds-per-prompt", type=int, default=None, help="teacher pairs per training prompt (default 48)")
    q.add_argument("--seed", type=int, default=None, help="seed of the training draws")
    q.add_argument("--quiet", action="store_true", help="no progress bars")
    q.set_defaults(func=cmd_distill_sibling)
