"""Commands about models and rewards: the registered rewards, and tiny random-weight models."""

from __future__ import annotations

from solrl_core.errors import SolrlError


def cmd_rewards(args) -> int:
    from solrl_core.rewards.commands import check_config_rewards, format_table, list_rewards

    if args.action == "list":
        models = {}
        if args.config:
            from solrl_core.config.loading import load_config

            models = load_config(args.config, args.set or []).reward_models
        rows = list_rewards(models)
        print(format_table(rows, [c for c in ("name", "needs", "found", "summary") if c in rows[0]]))
        return 0
    if not args.config:
        raise SolrlError("solrl rewards check needs --config CONFIG (its rewards and reward_models are checked)")
    from solrl_core.config.loading import load_config

    rows = check_config_rewards(load_config(args.config, args.set or []))
    print(format_table(rows, list(rows[0].keys())))
    return 0 if all(row.get("ok") for row in rows) else 1


def cmd_make_tiny(args) -> int:
    from solrl_core.userfiles import check_output_dir

    check_output_dir(args.dir, "make-tiny DIR")
    from solrl_core.tiny_bundle import make_tiny_bundle

    summary = make_tiny_bundle(args.model, args.dir)
    print(f"tiny {summary['model']} model ({summary['kind']}) in {summary['dir']}")
    print(f"  rewards  : {summary['dir']}/rewards ({', '.join(summary['rewards'])})")
    print(f"  prompts  : {summary['prompts']}")
    print(f"  overrides: {summary['overrides']} (applied whenever model.path is this directory)")
    from solrl_core.config.presets import MODELS

    if summary["model"] in MODELS:  # a model without presets has no command to suggest yet
        print(f"try: solrl train {summary['model']}_sol_rl_pickscore --iterations 1 "
              f"--set model.path={summary['dir']}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("rewards", help="the registered rewards; check a config's reward weights and scores",
                       description="list: the registered rewards, what each needs and whether its files are found. "
                       "check --config CONFIG: for each reward of the config (training and eval), whether its "
                       "weights are found, and its scores on a small sample batch. Exit 1 if any reward fails.")
    p.add_argument("action", choices=["list", "check"], help="list the registered rewards, or check a config's")
    p.add_argument("--config", help="YAML config (a file or a packaged config's name) whose rewards / reward_models "
                   "to use")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    p.set_defaults(func=cmd_rewards)

    p = sub.add_parser("make-tiny", help="write a tiny random-weight model that runs the official presets on a CPU",
                       description="Write into DIR a tiny random-weight diffusers model of MODEL's architecture, tiny "
                       "reward checkpoints in the official layouts (DIR/rewards), a prompt file and DIR/solrl_tiny.yaml: "
                       "run overrides (CPU, small resolution, 2 prompts x 8 seeds, K=4) applied to any config whose "
                       "model.path is DIR, so e.g. `solrl train MODEL_sol_rl_pickscore "
                       "--iterations 1 --set model.path=DIR` runs on a CPU (--set still wins).")
    from solrl_core.models.backbones.tiny import tiny_models

    p.add_argument("model", help=" | ".join(tiny_models()))
    p.add_argument("dir", help="output directory (created)")
    p.set_defaults(func=cmd_make_tiny)
