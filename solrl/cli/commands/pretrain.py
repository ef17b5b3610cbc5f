"""`solrl pretrain`: the embedded models' pretraining (the image model, or with --world motion the video model)."""

from __future__ import annotations

import json


def cmd_pretrain(args) -> int:
    from solrl_core.userfiles import check_output_dir

    check_output_dir(args.out, "--out")  # before the hour of pretraining, not after it
    from solrl_core.lab.embedded_pretrain import pretrain

    summary = pretrain(args.out, steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                       progress=True, world_name=args.world, threads=args.threads, save_every=args.save_every)
    print(json.dumps(summary, indent=2))
    return 0


def register(sub) -> None:
    p = sub.add_parser("pretrain", help="pretrain an embedded model (reproduces the shipped weights)",
                       description="Flow-matching pretraining of the embedded text-to-image model on procedurally "
                       "drawn shapes (--world shapes), or of the embedded text-to-video model on moving shapes "
                       "(--world motion), or of the embedded editing model on edits of those shapes (--world edits). "
                       "The defaults reproduce the weights shipped in solrl_core/models/embedded/pretrained/, "
                       "pretrained_video/ and pretrained_edit/.")
    p.add_argument("--out", required=True, help="output directory (diffusers/transformers layout)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the shipped weights' count)")
    p.add_argument("--batch-size", type=int, default=None, help="images per step (default: the shipped weights')")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the shipped weights')")
    p.add_argument("--seed", type=int, default=0, help="random seed (shapes drawn, initial weights)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: those the world's shipped weights were trained with; the same seed "
                   "and threads give the same weights)")
    p.add_argument("--save-every", type=int, default=0,
                   help="also save the EMA weights to --out every this many steps, overwritten, marked partial in "
                   "their metadata (default 0: only at the end)")
    p.add_argument("--world", choices=("shapes", "motion", "edits"), default="shapes",
                   help="shapes: the image model (model.kind embedded); motion: the video model of shapes moving "
                   "left, right, up or down (model.kind embedded_video); edits: the editing model (model.kind "
                   "embedded_edit), fine-tuned from the shipped image model on the editing world's pairs")
    p.set_defaults(func=cmd_pretrain)
