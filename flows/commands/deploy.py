"""`solrl deploy`: the training flow and every stage as Prefect deployments."""

from __future__ import annotations

from pathlib import Path

from flows.prefect_server import client_env
from solrl_core.wording import plural


def cmd_deploy(args) -> int:
    from solrl_core.config import load_config
    from solrl_core.runs import default_run_dir

    overrides = list(args.set or [])
    cfg = load_config(args.config, overrides)
    from solrl_core.storage import as_path, location

    run_dir = location(as_path(args.run_dir or default_run_dir(cfg)))
    client_env()
    from flows.deploy import check_schedule, deploy_all, require_api, train_command

    check_schedule(args.cron, args.interval)
    url = require_api()
    info = deploy_all(cfg, Path(args.config).resolve(), run_dir, overrides, args.name, args.cron, args.interval)
    schedule = f"cron '{args.cron}'" if args.cron else f"every {args.interval:g} s" if args.interval else "none"
    print(f"deployed to {url}")
    print(f"training : {info['training']}  (work pool '{info['training_pool']}', schedule: {schedule})")
    print(f"           = {train_command(Path(args.config).resolve(), run_dir, overrides)}")
    for stage, name in info["stages"].items():
        print(f"stage    : {name}")
    for pool in info["pools"]:
        made = " (created)" if pool in info["created_pools"] else ""
        print(f"pool     : {pool}{made}, {plural(info['workers'][pool], 'worker')} online; "
              f"start one with: prefect worker start --pool {pool}")
    auto = info["heartbeat_automation"]
    print(f"automation: '{auto['name']}' ({auto['status']}): runs without heartbeat for {auto['timeout']:g} s "
          "are marked Crashed")
    print(f"run now  : prefect deployment run '{info['training']}'")
    return 0


def register(sub) -> None:
    p = sub.add_parser("deploy", help="register the training flow and every stage as Prefect deployments",
                       description="Register, on the Prefect server of PREFECT_API_URL, the deployment "
                       "solrl-train-config/<name> (what `solrl train CONFIG --run-dir DIR --set ...` does; optionally "
                       "on a schedule) and solrl-stage/<stage>@<pool> for each stage (what `solrl stage` does; "
                       "parameters run_dir and iteration), on the work pools of the config's `orchestration` section "
                       "(process pools, created when missing). Workers import the flows from the installed solrl package and "
                       "run them in the directory they were started in.")
    p.add_argument("config", help="YAML config, e.g. configs/demo.yaml")
    p.add_argument("--run-dir", help="the run directory the training deployment trains (default runs/<config name>/)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    p.add_argument("--name", help="name of the training deployment (default: the config's name)")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--cron", metavar="EXPR", help="schedule the training deployment, e.g. '0 3 * * *'")
    when.add_argument("--interval", type=float, metavar="SECONDS", help="schedule it every SECONDS")
    p.set_defaults(func=cmd_deploy)
