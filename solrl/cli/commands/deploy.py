"""`solrl deploy`: the training flow and every stage as Prefect deployments."""

from __future__ import annotations

from solrl.flows.prefect_server import client_env
from solrl_core.errors import SolrlError
from solrl_core.wording import plural


def cmd_deploy(args) -> int:
    from solrl_core.config.loading import load_config
    from solrl_core.config.sources import resolve_config
    from solrl_core.run_config import default_run_dir

    from solrl_core.config.schema import plain_name_problem

    if args.name is not None and (problem := plain_name_problem(args.name)):
        raise SolrlError(f"--name {args.name!r} {problem}: it names the deployment and its run directory runs/<name>; "
                         "give a plain name")
    overrides = list(args.set or [])
    cfg = load_config(args.config, overrides)
    from solrl_core.run.storage import as_path, location

    run_dir = location(as_path(args.run_dir or default_run_dir(cfg, args.name)))
    client_env()
    from solrl.flows.deploy import check_schedule, check_tracking_uri, deploy_all, require_api, train_command

    check_schedule(args.cron, args.interval)
    url = require_api()
    tracking = check_tracking_uri(cfg, run_dir)
    if _fill_in_tracking(cfg, run_dir, tracking):  # the deployment logs where this command found a server
        overrides.append(f"tracking.uri={tracking}")
        cfg = load_config(args.config, overrides)
    config = resolve_config(args.config).resolve()  # a file or a packaged config's name
    info = deploy_all(cfg, config, run_dir, overrides, args.name, args.cron, args.interval)
    schedule = f"cron '{args.cron}'" if args.cron else f"every {args.interval:g} s" if args.interval else "none"
    print(f"deployed to {url}")
    print(f"training : {info['training']}  (work pool '{info['training_pool']}', schedule: {schedule})")
    print(f"           = {train_command(config, run_dir, overrides)}")
    existing = _existing_run(run_dir)
    if existing:
        print(f"run dir  : {run_dir} already holds a run ({existing}): the deployment resumes it, or trains nothing "
              "when it is complete; --run-dir DIR (or another --name) for a new run")
    print(f"tracking : {tracking}  (MLflow)")
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


def _existing_run(run_dir: str) -> str | None:
    """How far the run in `run_dir` is ("24 of 24 iterations complete"), None when it holds none."""
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_config import load_run_config

    run = RunDir(run_dir)
    if not run.config_path.is_file():
        return None
    done = sum(1 for i in run.iterations_present() if run.is_complete(i, "update"))
    return f"{done} of {load_run_config(run).iterations} iterations complete"


def _fill_in_tracking(cfg, run_dir, tracking: str) -> bool:
    """Whether the deployment gets `--set tracking.uri=TRACKING`: the config leaves tracking.uri unset, this command
    reaches an MLflow server through it (MLFLOW_TRACKING_URI, or the server of `make server` serving ./mlruns.db), and
    the run directory has no frozen config yet (a run's config, and so its store, are decided once). Without it, a
    worker in another directory would log to a mlruns.db of its own."""
    from solrl_core.mlflow_links import is_server
    from solrl_core.run.rundir import RunDir

    return cfg.tracking.uri is None and is_server(tracking) and not RunDir(run_dir).config_path.is_file()


def register(sub) -> None:
    p = sub.add_parser("deploy", help="register the training flow and every stage as Prefect deployments",
                       description="Register, on the Prefect server of PREFECT_API_URL, the deployment "
                       "solrl-train-config/<name> (what `solrl train CONFIG --run-dir DIR --set ...` does; optionally "
                       "on a schedule) and solrl-stage/<stage>@<pool> for each stage (what `solrl stage` does; "
                       "parameters run_dir and iteration), on the work pools of the config's `orchestration` section "
                       "(process pools, created when missing). Workers import the flows from the installed solrl package and "
                       "run them in the directory they were started in. First the MLflow store the training will "
                       "log to must answer (and be reached through its server when its artifacts are proxied); with "
                       "tracking.uri unset, a server found through MLFLOW_TRACKING_URI or `make server` is filled in "
                       "for a new run.")
    p.add_argument("config", help="YAML config: a file, or a packaged config's name (`solrl presets`), e.g. demo; "
                   "the deployment carries it resolved, so workers need no copy")
    p.add_argument("--run-dir", help="the run directory the training deployment trains (default runs/<--name>/, "
                   "else runs/<config name>/)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    p.add_argument("--name", help="name of the training deployment and of its default run directory "
                   "(default: the config's name)")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--cron", metavar="EXPR", help="schedule the training deployment, e.g. '0 3 * * *'")
    when.add_argument("--interval", type=float, metavar="SECONDS", help="schedule it every SECONDS")
    p.set_defaults(func=cmd_deploy)
