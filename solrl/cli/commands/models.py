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
    from solrl_core.config.presets import MODEL_SPECS, model_rewards

    model = summary["model"]
    if model in MODEL_SPECS:  # a model without presets has no command to suggest yet
        # an editing model's presets train on an edit prompt set, which the bundle's prompts.txt is not
        edits = (" --set prompts.train=EDITS.jsonl --set eval.prompts=EDITS.jsonl (EDITS.jsonl: your edit prompts, "
                 "docs/editing.md)") if MODEL_SPECS[model].edits else ""
        print(f"try: solrl train {model}_sol_rl_{model_rewards(model)[0]} --iterations 1 "
              f"--set model.path={summary['dir']}{edits}")
    return 0


def cmd_serve_reward(args) -> int:
    import os

    from solrl_core.exposure import check_exposure, local_address
    from solrl_core.rewards.wire import TOKEN_VARIABLE

    token = os.environ.get(TOKEN_VARIABLE) or None
    warning = check_exposure(args.host, "reward server", "score with the reward's model and read its fingerprint",
                             token is not None, f"set {TOKEN_VARIABLE} (its clients send the same)", args.insecure)
    models = {}
    if args.config:
        from solrl_core.config.loading import load_config

        models = load_config(args.config, args.set or []).reward_models
    from solrl_core.rewards.registry import get_reward, parse_reward_models

    specs = parse_reward_models(models)
    if args.reward in specs and specs[args.reward].url:
        raise SolrlError(f"reward_models.{args.reward}.url is set in the config: the server scores the reward itself "
                         "(remove url for serve-reward)")
    reward = get_reward(args.reward, models)
    import uvicorn

    from solrl_core.rewards.serving import build_app

    if warning:
        print(f"solrl: {warning}")
    url = f"http://{local_address(args.host)}:{args.port}"
    print(f"serving reward {args.reward} (batch {reward.batch_size}, {reward.device}, {reward.dtype}) at {url}; "
          f"a config scores with it through: reward_models: {{{args.reward}: {{url: {url}}}}}", flush=True)
    uvicorn.run(build_app(reward, token), host=args.host, port=args.port, log_level="warning")
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

    p = sub.add_parser("serve-reward", help="serve a reward over HTTP for runs elsewhere (reward_models.NAME.url)",
                       description="Load the reward REWARD (registered or package.module:Class; its files as "
                       "--config's reward_models section says) and serve it over HTTP on FastAPI/uvicorn: GET /health "
                       "(name, version, fingerprint), POST /score (a safetensors batch of uint8 images and their "
                       "prompts). A run scores with it when its config sets reward_models.REWARD.url; its scores "
                       "equal in-process scores bit for bit. Binds 127.0.0.1 unless --host says otherwise; beyond "
                       "loopback it requires the bearer token in SOLRL_REWARD_TOKEN (its clients send the same).")
    p.add_argument("reward", help="the reward to serve: a registered name (solrl rewards list) or package.module:Class")
    p.add_argument("--config", help="config (a file or a packaged config's name) whose reward_models say where the "
                   "reward's files are")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--insecure", action="store_true", help="bind beyond loopback without a token (the address is "
                   "protected otherwise)")
    p.set_defaults(func=cmd_serve_reward)
