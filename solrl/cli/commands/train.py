"""Training commands: a whole run, one stage alone, and a machine's share of a multi-node update."""

from __future__ import annotations

import json
import sys

from solrl.cli.commands.options import output_options, show_progress
from solrl.flows.prefect_server import client_env, prefect_api
from solrl.flows.service_checks import check_services
from solrl_core.errors import SolrlError
from solrl_core.wording import plural


def cmd_train(args) -> int:
    from solrl_core.config.loading import load_config
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_config import default_run_dir, prepare_run

    overrides = list(args.set or [])
    if args.iterations is not None:
        if args.iterations < 1:
            raise SolrlError(f"--iterations {args.iterations} is out of range: give 1 or more")
        overrides.append(f"iterations={args.iterations}")
    cfg = load_config(args.config, overrides)
    run = RunDir(args.run_dir or default_run_dir(cfg))
    run.check_writable()
    client_env()
    check_services(cfg, run)
    with run.hold():
        api = prefect_api()  # a temporary Prefect server boots while the model loads
        from solrl_core.run_preflight import preflight  # torch and the models: after the config's own errors

        preflight(cfg)
        prepare_run(run, cfg)
        if not args.quiet:  # what the learning matrix measured of this objective x family (configs/measured/)
            from solrl_core.config.learning_status import learning_note

            note = learning_note(cfg)
            if note:
                print(f"note: {note}")  # the run's first line on stdout: stderr is for what went wrong
        from solrl.flows.training import training_flow
        from solrl.flows.tracking_status import mlflow_run_training

        with mlflow_run_training(run, cfg) as info, api.ready() as prefect_url:
            history = training_flow(str(run.root), cfg.iterations, progress=show_progress(args))
            prefect_ui = None if api.server is not None and prefect_url == api.server.url else _prefect_ui()
    train = [h["reward/train_mean"] for h in history]
    evals = run.evaluations()
    curve = None
    if evals:  # the plot is part of the run directory, also under --quiet
        from solrl_core.learning_curve import CURVE_FILE, eval_table, plot_eval_curve

        curve = plot_eval_curve(evals, run.root / CURVE_FILE, title=f"{cfg.name}: held-out evaluation")
    if args.quiet:
        print(f"trained {plural(cfg.iterations, 'iteration')} in {run.root}; reward/train_mean by iteration: "
              + " ".join(f"{r:.2f}" for r in train))
        return 0
    print(f"\ntrained {plural(cfg.iterations, 'iteration')}; reward/train_mean by iteration "
          "(depends on the prompts drawn): " + " ".join(f"{r:.2f}" for r in train))
    if evals:
        print("held-out evaluation (EMA weights, fixed prompts and seeds):")
        print(eval_table(evals))
    print(f"run directory : {run.root}")
    if curve is not None:
        print(f"learning curve: {curve}")
    print(f"best/worst    : {run.iteration_dir(cfg.iterations - 1) / 'best_worst.png'}")
    print(f"status        : solrl status --run-dir {run.root}")
    from solrl_core.mlflow_links import run_link

    link = run_link(info)
    print(f"MLflow run    : {link['url']}")
    if link["ui_command"]:  # no server serves the store
        print(f"                (no MLflow server serves {link['tracking_uri']}; start one: {link['ui_command']})")
    if prefect_ui:
        print(f"Prefect UI    : {prefect_ui}")
    else:  # the command's temporary server recorded the runs in Prefect's own database, and has stopped
        from solrl.flows.servers import prefect_ui_command

        print(f"Prefect UI    : {prefect_ui_command()}; this run's flow runs are in Prefect's default database")
    return 0


def _prefect_ui() -> str:
    """The UI address of the Prefect server in use (Prefect's PREFECT_UI_URL: the API URL without /api)."""
    from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL

    return PREFECT_UI_URL.value() or PREFECT_API_URL.value()


def cmd_stage(args) -> int:
    from solrl_core.run.rundir import STAGES, RunDir
    from solrl_core.placement import check_devices
    from solrl_core.run_config import check_iteration, load_run_config
    from solrl_core.run.staleness import missing_input_error, missing_inputs
    from solrl_core.stages.runner import verify_inputs
    from solrl_core.run.staleness import is_current, recompute_command, stale_items, stale_where
    from solrl_core.status import stale_lines
    from solrl_core.run.storage import lock_wait_seconds

    if args.name not in STAGES:
        raise SolrlError(f"unknown stage '{args.name}' (stages: {', '.join(STAGES)})")
    run = RunDir(args.run_dir)
    cfg = load_run_config(run)
    check_iteration(cfg, args.iteration)
    check_devices(cfg, update=args.name == "update")
    missing = missing_inputs(run, args.iteration, args.name)
    if missing:
        raise missing_input_error(run, args.iteration, f"stage '{args.name}'", missing)
    if is_current(run, args.iteration, args.name) and not args.force:
        print(f"{args.name} of iteration {args.iteration} is already complete (use --force to run it again)")
        return 0
    verify_inputs(run, args.iteration, args.name)  # checked again by the stage; here before Prefect starts
    stale_before = {stale_where(item) for item in stale_items(run)}
    with run.hold(wait=lock_wait_seconds(args.lock_wait)):  # another command holds the run: wait for it
        client_env()
        check_services(cfg, tracking=False)
        api = prefect_api()
        from solrl.flows.stage import stage_flow

        with api.ready():
            manifest = stage_flow(str(run.root), args.name, args.iteration, force=args.force,
                                  progress=not args.quiet)
    print(json.dumps(manifest["summary"], indent=2))
    made_stale = [item for item in stale_items(run) if stale_where(item) not in stale_before]
    for line in stale_lines(made_stale, recompute_command(run), label="made stale"):
        print(line, file=sys.stderr)
    return 0


def cmd_update_node(args) -> int:
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_config import check_iteration, load_run_config
    from solrl_core.stages.update_node import join_updates

    run = RunDir(args.run_dir)
    if args.iteration is not None:
        check_iteration(load_run_config(run), args.iteration)
    attempts = {} if args.attempts is None else {"attempts": args.attempts}
    summaries = join_updates(run, args.iteration, force=args.force, **attempts,
                             say=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps({str(it): summary for it, summary in summaries.items()}, indent=2))
    return 0


def register(sub) -> None:
    p = sub.add_parser("train", help="train a run from a YAML config (resumes an existing run directory)",
                       description="Run the training flow: iterations of quantize → explore → score → select → "
                       "regenerate → score → update. Re-running the same command resumes after a crash.")
    p.add_argument("config", help="YAML config: a file, or a packaged config's name (`solrl presets`), e.g. demo")
    p.add_argument("--run-dir", help="where artifacts go (default runs/<config name>/)")
    p.add_argument("--iterations", type=int, help="number of iterations (overrides the config's `iterations`)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config key, e.g. --set train.optimizer.lr=1e-4 (repeatable)")
    output_options(p, no_progress=True)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("stage", help="run one stage of one iteration alone",
                       description="Run a single stage from the artifacts of the stages before it. Stages: "
                       "quantize, explore, score_explore, select, regenerate, score_final, update.")
    p.add_argument("name", help="stage name")
    p.add_argument("--run-dir", required=True, help="an existing run directory")
    p.add_argument("--iteration", type=int, required=True, help="iteration number (from 0)")
    p.add_argument("--force", action="store_true",
                   help="compute the stage again (its artifact stays until the new one is complete); the stages that "
                   "read it become stale (`solrl status` lists them, `solrl train` recomputes them)")
    p.add_argument("--lock-wait", type=float, metavar="SECONDS",
                   help="while another command holds the run directory, wait up to this long for it, then fail "
                   "(default: $SOLRL_LOCK_WAIT, else 600; 0 = fail at once)")
    output_options(p)
    p.set_defaults(func=cmd_stage)

    p = sub.add_parser("update-node", help="take part in a multi-node update from another training machine",
                       description="With train.nodes > 1: this machine's share of the update (train.processes "
                       "torchrun processes meeting the machine that runs the update stage at train.rdzv_endpoint). "
                       "Waits until an iteration's update can start in the run directory (shared by all machines), "
                       "joins it, and goes on until the run's last iteration is updated.")
    p.add_argument("--run-dir", required=True, help="the run directory, as this machine sees it")
    p.add_argument("--iteration", type=int, help="join this iteration's update only")
    p.add_argument("--force", action="store_true",
                   help="with --iteration: join even when that update is complete (the stage runs again with --force)")
    p.add_argument("--attempts", type=int, metavar="N",
                   help="join an iteration's update up to N times when it fails (the update stage's task is retried, "
                   "and this machine's torchrun waits for it at the rendezvous), then stop (default: 3, the first "
                   "join, the stage's retry and a spare)")
    p.set_defaults(func=cmd_update_node)
