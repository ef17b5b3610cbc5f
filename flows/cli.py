"""The `solrl` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from flows.preflight import check_services
from flows.prefect_server import client_env, prefect_api
from flows.signals import interrupted_exit_code, stop_on_sigterm
from flows.user_errors import as_user_error, hide_user_error_logs, report
from solrl_core.errors import SolrlError
from solrl_core.quiet import quiet_libraries
from solrl_core.wording import plural

DESCRIPTION = """\
solrl: RL post-training of text-to-image flow models with 4-bit exploration.
Each iteration explores many seeds per prompt with a low-precision copy, ranks them with the reward, keeps the
most contrastive seeds, regenerates those at full precision and trains on them (DiffusionNFT loss).
Every stage writes its artifact into the run directory, so runs resume after a crash and stages re-run alone."""


# Prefect's console handler (its API handler still receives every line, so the Prefect UI keeps them) and MLflow.
_LOG_LEVEL_VARIABLES = ("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "MLFLOW_LOGGING_LEVEL")


def _terminal(args) -> None:
    """What the terminal shows, set before Prefect and MLflow are imported: their own log lines only from WARNING up
    (unless set in the environment), ERROR with --quiet, INFO with --verbose."""
    level = "INFO" if getattr(args, "verbose", False) else "ERROR" if getattr(args, "quiet", False) else None
    for name in _LOG_LEVEL_VARIABLES:
        if level:
            os.environ[name] = level
        else:
            os.environ.setdefault(name, "WARNING")


def _progress(args) -> bool:
    return not (args.no_progress or args.quiet)


def _default_run_dir(cfg) -> Path:
    return Path("runs") / cfg.name


def _preflight(cfg) -> None:
    """Fail fast, before any flow starts, on what a user can fix: devices, prompts and model weights."""
    from solrl_core.placement import check_devices
    from solrl_core.quant.backends import resolve_backend
    from solrl_core.rewards.registry import preflight_rewards
    from solrl_core.backbones.cache import load_backbone
    from solrl_core.prompts import train_prompt_set

    check_devices(cfg)
    preflight_rewards(cfg.rewards, cfg.reward_models)
    if cfg.eval.every and cfg.eval.rewards:
        preflight_rewards(cfg.eval.rewards, cfg.reward_models)
    resolve_backend(cfg.explore.precision, cfg.model.device)
    train_prompt_set(cfg)
    load_backbone(cfg)


def cmd_train(args) -> int:
    from solrl_core.config import load_config
    from solrl_core.rundir import RunDir
    from solrl_core.runs import prepare_run

    overrides = list(args.set or [])
    if args.iterations is not None:
        if args.iterations < 1:
            raise SolrlError(f"--iterations {args.iterations} is out of range: give 1 or more")
        overrides.append(f"iterations={args.iterations}")
    cfg = load_config(args.config, overrides)
    run = RunDir(args.run_dir or _default_run_dir(cfg))
    run.check_writable()
    client_env()
    check_services(cfg, run)
    with run.hold():
        api = prefect_api()  # a temporary Prefect server boots while the model loads
        _preflight(cfg)
        prepare_run(run, cfg)
        from flows.training import training_flow
        from flows.tracking import ensure_mlflow_run

        info = ensure_mlflow_run(run, cfg)
        with api.ready():
            history = training_flow(str(run.root), cfg.iterations, progress=_progress(args))
    train = [h["reward/train_mean"] for h in history]
    if args.quiet:
        print(f"trained {plural(cfg.iterations, 'iteration')} in {run.root}; reward/train_mean by iteration: "
              + " ".join(f"{r:.2f}" for r in train))
        return 0
    print(f"\ntrained {plural(cfg.iterations, 'iteration')}; reward/train_mean by iteration "
          "(depends on the prompts drawn): " + " ".join(f"{r:.2f}" for r in train))
    evals = run.evaluations()
    if evals:
        print("held-out eval reward (EMA weights, fixed prompts and seeds) after N iterations: "
              + ", ".join(f"{e['step']}: {e['metrics']['reward']:.4f}" for e in evals))
    print(f"run directory : {run.root}")
    print(f"best/worst    : {run.iteration_dir(cfg.iterations - 1) / 'best_worst.png'}")
    print(f"status        : solrl status --run-dir {run.root}")
    print(f"MLflow UI     : mlflow ui --backend-store-uri {info['tracking_uri']} --host 127.0.0.1 --port 5000")
    print("Prefect UI    : prefect server start --host 127.0.0.1  (then open http://127.0.0.1:4200)")
    return 0


def cmd_stage(args) -> int:
    from solrl_core.rundir import STAGES, RunDir
    from solrl_core.placement import check_devices
    from solrl_core.runs import check_iteration, load_run_config
    from solrl_core.stages.registry import missing_input_error, missing_inputs, verify_inputs
    from solrl_core.staleness import is_current, recompute_command, stale_items, stale_where
    from solrl_core.status import stale_lines

    if args.name not in STAGES:
        raise SolrlError(f"unknown stage '{args.name}' (stages: {', '.join(STAGES)})")
    run = RunDir(args.run_dir)
    cfg = load_run_config(run)
    check_iteration(cfg, args.iteration)
    check_devices(cfg)
    missing = missing_inputs(run, args.iteration, args.name)
    if missing:
        raise missing_input_error(run, args.iteration, f"stage '{args.name}'", missing)
    if is_current(run, args.iteration, args.name) and not args.force:
        print(f"{args.name} of iteration {args.iteration} is already complete (use --force to run it again)")
        return 0
    verify_inputs(run, args.iteration, args.name)  # checked again by the stage; here before Prefect starts
    stale_before = {stale_where(item) for item in stale_items(run)}
    with run.hold():
        client_env()
        check_services(cfg, tracking=False)
        api = prefect_api()
        from flows.stage import stage_flow

        with api.ready():
            manifest = stage_flow(str(run.root), args.name, args.iteration, force=args.force,
                                  progress=not args.quiet)
    print(json.dumps(manifest["summary"], indent=2))
    made_stale = [item for item in stale_items(run) if stale_where(item) not in stale_before]
    for line in stale_lines(made_stale, recompute_command(run), label="made stale"):
        print(line, file=sys.stderr)
    return 0


def cmd_update_node(args) -> int:
    from solrl_core.rundir import RunDir
    from solrl_core.runs import check_iteration, load_run_config
    from solrl_core.stages.update_node import join_updates

    run = RunDir(args.run_dir)
    if args.iteration is not None:
        check_iteration(load_run_config(run), args.iteration)
    summaries = join_updates(run, args.iteration, force=args.force,
                             say=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps({str(it): summary for it, summary in summaries.items()}, indent=2))
    return 0


def cmd_deploy(args) -> int:
    from solrl_core.config import load_config

    overrides = list(args.set or [])
    cfg = load_config(args.config, overrides)
    from solrl_core.storage import as_path, location

    run_dir = location(as_path(args.run_dir or _default_run_dir(cfg)))
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


def cmd_status(args) -> int:
    from solrl_core.rundir import RunDir
    from solrl_core.status import run_status, status_text

    data = run_status(RunDir(args.run_dir))
    print(json.dumps(data, indent=2) if args.json else status_text(data))
    return 0


def cmd_inspect(args) -> int:
    from solrl_core.inspect import mlflow_link_text, pool_summary, shards_text
    from solrl_core.rundir import RunDir
    from solrl_core.runs import check_iteration, load_run_config

    run = RunDir(args.run_dir)
    check_iteration(load_run_config(run), args.iteration)
    summary = pool_summary(run, args.iteration)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"iteration {args.iteration}: {summary['candidates']} candidates, {summary['prompts']} prompts, "
          f"{summary['selected']} selected")
    q = summary["quantize"]
    if q:
        err = q.get("calibration_rel_error")
        print(f"explore copy: {q['precision']}, {q.get('steps')} steps; {q.get('layers_replaced', 0)} Linear layers "
              f"replaced, {q.get('low_precision_share', 0.0):.0%} of Linear weights in low precision"
              + (f", calibration output error {err:.4f}" if err is not None else ""))
        print(f"  why: {q.get('reason')}")
    if summary["shards"]:
        print("where it ran (device, process, seconds per shard):\n" + shards_text(summary["shards"]))
    for p in summary["per_prompt"]:
        print(f"\n[{p['prompt_index']}] {p['prompt']!r}: n={p['n']} proxy mean {p['proxy_mean']:.4f} "
              f"min {p['proxy_min']:.4f} max {p['proxy_max']:.4f}")
        for s in p["selected"]:
            final = "" if s["final"] is None else f"  final {s['final']:.4f}"
            print(f"    seed {s['seed']:>12}  proxy {s['proxy']:.4f}{final}")
    print("\n" + mlflow_link_text(summary["mlflow"], args.iteration))
    return 0


def cmd_pretrain(args) -> int:
    from solrl_core.embedded.pretrain import pretrain

    summary = pretrain(
        args.out, steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed, progress=True
    )
    print(json.dumps(summary, indent=2))
    return 0


def cmd_eval(args) -> int:
    from solrl_core.integrity import verify_checkpoint
    from solrl_core.staleness import eval_stale_cause
    from solrl_core.rundir import RunDir
    from solrl_core.placement import check_devices
    from solrl_core.runs import check_step, load_run_config

    run = RunDir(args.run_dir)
    cfg = load_run_config(run)
    if args.step is not None:
        check_step(cfg, args.step)
    done = [i + 1 for i in run.iterations_present() if run.is_complete(i, "update")]
    step = args.step if args.step is not None else max(done, default=0)
    if step and step not in done:
        raise SolrlError(f"no checkpoint after {step} iterations in {run.root} (finished: {done or 'none'})")
    verify_checkpoint(run, step - 1)  # checked again by the evaluation; here before Prefect starts
    evaluation = run.evaluation(step)
    if evaluation is not None and eval_stale_cause(run, step, evaluation) is None:
        # computed once (and not stale): no flow, no Prefect server (logged to MLflow unless it already is)
        from flows.tracking import log_evaluation

        log_evaluation(run, cfg, evaluation)
    else:
        check_devices(cfg)
        client_env()
        check_services(cfg, run)
        api = prefect_api()
        from flows.evaluation import evaluation_flow

        with api.ready():
            evaluation = evaluation_flow(str(run.root), step, progress=not args.quiet)
    print(f"evaluation after {plural(step, 'iteration')} ({'EMA' if evaluation['ema'] else 'policy'} weights, "
          f"{evaluation['samples']} samples):")
    for name, value in evaluation["metrics"].items():
        print(f"  eval/{name:<24} {value:.4f}")
    print(f"samples: {run.root / 'eval' / f'step_{step:04d}' / 'samples.png'}")
    return 0


def cmd_rewards(args) -> int:
    from solrl_core.rewards.commands import check_rewards, format_table, list_rewards

    if args.action == "list":
        models = {}
        if args.config:
            from solrl_core.config import load_config

            models = load_config(args.config, args.set or []).reward_models
        rows = list_rewards(models)
        print(format_table(rows, [c for c in ("name", "needs", "found", "summary") if c in rows[0]]))
        return 0
    if not args.config:
        raise SolrlError("solrl rewards check needs --config CONFIG (its rewards and reward_models are checked)")
    from solrl_core.config import load_config

    cfg = load_config(args.config, args.set or [])
    weights = dict(cfg.rewards)
    for name in cfg.eval.rewards or {}:
        weights.setdefault(name, 0.0)
    rows = check_rewards(weights, cfg.reward_models)
    print(format_table(rows, list(rows[0].keys())))
    return 0 if all(row.get("ok") for row in rows) else 1


def cmd_make_tiny(args) -> int:
    from solrl_core.backbones.tiny.bundle import make_tiny_bundle

    summary = make_tiny_bundle(args.model, args.dir)
    print(f"tiny {summary['model']} model ({summary['kind']}) in {summary['dir']}")
    print(f"  rewards  : {summary['dir']}/rewards ({', '.join(summary['rewards'])})")
    print(f"  prompts  : {summary['prompts']}")
    print(f"  overrides: {summary['overrides']} (applied whenever model.path is this directory)")
    print(f"try: solrl train configs/presets/{summary['model']}_sol_rl_pickscore.yaml --iterations 1 "
          f"--set model.path={summary['dir']}")
    return 0


def cmd_plan(args) -> int:
    if args.paper:
        from solrl_core.planner.compare import compare, format_markdown

        print(format_markdown(compare(args.gpu or "b200", args.gpus, args.utilisation), "solrl plan --paper"))
        return 0
    if not args.target or not args.gpu:
        raise SolrlError("solrl plan needs CONFIG or MODEL and --gpu NAME (e.g. solrl plan configs/demo.yaml --gpu "
                         "b200, solrl plan flux1 --gpu b200), or --paper")
    from solrl_core.planner.model import FAMILIES, format_plan, plan

    if args.target.endswith((".yaml", ".yml")):
        from solrl_core.config import load_config
        from solrl_core.planner.config_plan import plan_config

        if args.family and args.family not in FAMILIES:
            raise SolrlError(f"unknown family '{args.family}'; known: {', '.join(FAMILIES)}")
        result = plan_config(load_config(args.target, args.set or []), args.gpu, gpus=args.gpus,
                             utilisation=args.utilisation, model=args.model)
        if args.family:
            result["families"] = {args.family: result["families"][args.family]}
    else:
        if args.model:
            raise SolrlError("--model prices a CONFIG's shapes on another backbone; with a model name, drop it")
        result = plan(args.target, args.gpu, family=args.family, gpus=args.gpus, utilisation=args.utilisation)
    print(json.dumps(result, indent=2) if args.json else format_plan(result))
    return 0


def cmd_bench(args) -> int:
    from solrl_core.bench.config import bench_runs, load_bench_config
    from solrl_core.rundir import RunDir

    overrides = list(args.set or [])
    bench, base_dir = load_bench_config(args.config, overrides)
    runs = bench_runs(bench, base_dir, args.run_dir)
    root = RunDir(args.run_dir or bench.run_root)
    command = " ".join(["solrl", "bench", str(args.config), *[f"--set {o}" for o in overrides]])
    if args.report_only:
        from flows.tracking import log_bench_report, tracking_uri
        from solrl_core.bench.report import build_report

        done = [r for r in runs if RunDir(r.run_dir).config_path.is_file()]
        if not done:
            raise SolrlError(f"no benchmark runs under {root.root} yet; run: {command}")
        with root.hold():
            report = build_report(done, bench, root.root, command=command + " --report-only")
            report["mlflow"] = log_bench_report(root.root, tracking_uri(done[0].cfg), bench.tracking.experiment,
                                                report, [Path(p) for p in report["files"]])
    else:
        root.check_writable()
        client_env()
        check_services(runs[0].cfg)
        for label in dict.fromkeys(r.label for r in runs):
            _preflight(next(r.cfg for r in runs if r.label == label))
        with root.hold():
            api = prefect_api()
            from flows.bench import bench_flow

            with api.ready():
                report = bench_flow(str(args.config), overrides, args.run_dir, progress=_progress(args),
                                    command=command)
    print(f"\nbenchmark '{bench.name}': {plural(len(runs), 'run')} ({plural(bench.seeds, 'seed')} x "
          f"{plural(len(report['families']), 'family', 'families')}, {plural(bench.iterations, 'iteration')})")
    print(f"{'family':<16} {'final eval reward':>22}   modeled GPU-s to target (speed-up vs {bench.baseline})")
    for fam, d in report["families"].items():
        std = d.get("final_reward_std")
        final = "-" if d.get("final_reward") is None else f"{d['final_reward']:.4f}"
        final += f" +/- {std:.4f}" if std is not None else ""
        gpu = d.get("time_to_target", {}).get("gpu", {})
        cost = "not reached" if gpu.get("cost") is None else f"{gpu['cost']:.4g}"
        speed = gpu.get("speedup", {}).get(bench.baseline)
        print(f"{fam:<16} {final:>22}   {cost}" + ("" if speed is None else f" ({speed:.2f}x)"))
    print(f"report        : {root.root / 'report.md'}")
    print(f"MLflow run    : {report['mlflow']['mlflow_run_id']} at {report['mlflow']['tracking_uri']}")
    return 0


def _output_options(p: argparse.ArgumentParser, no_progress: bool = False) -> None:
    """--verbose / --quiet (and --no-progress) for the commands that run flows."""
    if no_progress:
        p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    loud = p.add_mutually_exclusive_group()
    loud.add_argument("--verbose", action="store_true", help="also show Prefect's INFO log lines (flow and task runs)")
    loud.add_argument("--quiet", action="store_true",
                      help="for scripts: no progress bars, no log lines but errors, only the final result")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="solrl", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train a run from a YAML config (resumes an existing run directory)",
                       description="Run the training flow: iterations of quantize → explore → score → select → "
                       "regenerate → score → update. Re-running the same command resumes after a crash.")
    p.add_argument("config", help="YAML config, e.g. configs/demo.yaml")
    p.add_argument("--run-dir", help="where artifacts go (default runs/<config name>/)")
    p.add_argument("--iterations", type=int, help="number of iterations (overrides the config's `iterations`)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config key, e.g. --set train.optimizer.lr=1e-4 (repeatable)")
    _output_options(p, no_progress=True)
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
    _output_options(p)
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
    p.set_defaults(func=cmd_update_node)

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

    p = sub.add_parser("status", help="where a run stands: iterations done of the target, evaluation, MLflow run",
                       description="Print a run's target and completed iterations, each stage of each iteration "
                       "(done, part = interrupted: an artifact without its manifest, - = not started), the last "
                       "held-out evaluation (step and rewards) and where to look: the run directory and its MLflow "
                       "run (tracking URI, run id, UI address).")
    p.add_argument("--run-dir", required=True, help="the run directory")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("inspect", help="an iteration's candidate pool: counts, reward statistics, selected seeds",
                       description="Print one iteration's explore pool: how many candidates and prompts, the explore "
                       "copy's quantization, where each shard ran, per prompt the proxy reward's mean, min and max "
                       "and the selected seeds with their proxy and final rewards, and where the pool table is in "
                       "MLflow.")
    p.add_argument("--run-dir", required=True, help="the run directory")
    p.add_argument("--iteration", type=int, required=True, help="iteration number (from 0)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("eval", help="held-out rewards of a run's policy (EMA weights, fixed prompts and seeds)",
                       description="Evaluate the policy after STEP iterations (default: the latest checkpoint; 0 = "
                       "before training) on the eval prompts and seeds of the run's config, with every eval reward, "
                       "and print each reward's mean and the path of the sample grid. Stored in "
                       "<run-dir>/eval/step_NNNN/ (computed once) and logged to the run's MLflow run.")
    p.add_argument("--run-dir", required=True, help="the run directory")
    p.add_argument("--step", type=int, default=None, help="iterations done (default: latest)")
    _output_options(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("rewards", help="the registered rewards; check a config's reward weights and scores",
                       description="list: the registered rewards, what each needs and whether its files are found. "
                       "check --config CONFIG: for each reward of the config (training and eval), whether its "
                       "weights are found, and its scores on a small sample batch. Exit 1 if any reward fails.")
    p.add_argument("action", choices=["list", "check"], help="list the registered rewards, or check a config's")
    p.add_argument("--config", help="YAML config whose rewards / reward_models to use")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    p.set_defaults(func=cmd_rewards)

    p = sub.add_parser("make-tiny", help="write a tiny random-weight model that runs the official presets on a CPU",
                       description="Write into DIR a tiny random-weight diffusers model of MODEL's architecture, tiny "
                       "reward checkpoints in the official layouts (DIR/rewards), a prompt file and DIR/solrl_tiny.yaml: "
                       "run overrides (CPU, small resolution, 2 prompts x 8 seeds, K=4) applied to any config whose "
                       "model.path is DIR, so e.g. `solrl train configs/presets/MODEL_sol_rl_pickscore.yaml "
                       "--iterations 1 --set model.path=DIR` runs on a CPU (--set still wins).")
    p.add_argument("model", help="flux1 | sd35l | sd35m | sana")
    p.add_argument("dir", help="output directory (created)")
    p.set_defaults(func=cmd_make_tiny)

    p = sub.add_parser("plan", help="predict seconds per stage and iteration of each family on a GPU",
                       description="Count the FLOPs of one forward of a full-size backbone (meta device, no weights) "
                       "and predict each family's seconds per stage on a GPU from its published dense throughput "
                       "at a stated utilisation, at a run config's per-iteration sizes (CONFIG) or the official "
                       "ones (MODEL). --paper compares the predictions with the paper's iteration times.")
    p.add_argument("target", nargs="?", metavar="CONFIG|MODEL",
                   help="a run config (its backbone and per-iteration sizes; the other families at the same sizes) "
                   "or a model: flux1 | sd35l | sd35m | sana (official sizes)")
    p.add_argument("--model", help="with CONFIG: price its sizes on this backbone instead (flux1, sd35l, ...)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="with CONFIG: override a config key")
    p.add_argument("--gpu", help="b200, gb200, b300, h100, h200, a100, rtx-pro-6000, rtx-5090, l40s, ...")
    p.add_argument("--family", help="one family only (default: all four)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per iteration (default 8, as the paper)")
    p.add_argument("--utilisation", type=float, default=None, help="fraction of peak throughput (default 0.4)")
    p.add_argument("--paper", action="store_true", help="the paper's three models against its reported times")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("bench", help="train the four families side by side and write a comparison report",
                       description="Train every family config of a bench config (diffusionnft, naive_scaling, "
                       "naive_quant, sol_rl) with the same prompts, seeds and iteration count, once per run seed, "
                       "into <run-dir>/<family>-s<seed>/ (runs resume), then write <run-dir>/report.md with PNG plots "
                       "and report.json, and log them to MLflow: held-out eval reward against iterations, measured "
                       "CPU seconds and modeled GPU cost; time to reach the baseline's final reward and the speed-ups; "
                       "final rewards with their spread over seeds; ranking fidelity per iteration and the "
                       "full-fidelity audits. configs/bench.yaml is sized for about 45 minutes on 2 CPU cores.")
    p.add_argument("config", help="bench YAML, e.g. configs/bench.yaml")
    p.add_argument("--run-dir", help="where the runs and the report go (default: the config's run_root, runs/bench)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a bench config key, e.g. --set iterations=4 or --set seeds=1 (repeatable)")
    p.add_argument("--report-only", action="store_true",
                   help="do not train: rebuild the report from the runs already in the run directory")
    _output_options(p, no_progress=True)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("pretrain", help="pretrain the embedded default model (reproduces the shipped weights)",
                       description="Flow-matching pretraining of the embedded text-to-image model on procedurally "
                       "drawn shapes. The defaults reproduce the weights shipped in solrl_core/embedded/pretrained/.")
    p.add_argument("--out", required=True, help="output directory (diffusers/transformers layout)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the shipped weights' count)")
    p.add_argument("--batch-size", type=int, default=None, help="images per step (default: the shipped weights')")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the shipped weights')")
    p.add_argument("--seed", type=int, default=0, help="random seed (shapes drawn, initial weights)")
    p.set_defaults(func=cmd_pretrain)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_libraries()
    _terminal(args)
    hide_user_error_logs()
    stop_on_sigterm()
    try:
        return args.func(args)
    except (SolrlError, OSError) as exc:  # an OSError only when the user can fix it (full disk, permissions)
        error = as_user_error(exc)
        if error is None:
            raise
        return report(error)
    except KeyboardInterrupt:
        print("solrl: interrupted; run the same command again to resume", file=sys.stderr)
        return interrupted_exit_code()


if __name__ == "__main__":
    sys.exit(main())
