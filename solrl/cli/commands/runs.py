"""Commands that read a run: where it stands, an iteration's pool, held-out evaluation."""

from __future__ import annotations

import json

from solrl.cli.commands.options import output_options
from solrl.flows.prefect_server import client_env, prefect_api
from solrl.flows.service_checks import check_services
from solrl_core.errors import SolrlError
from solrl_core.wording import plural


def cmd_status(args) -> int:
    from solrl_core.run.rundir import RunDir
    from solrl_core.status import run_status, status_text

    data = run_status(RunDir(args.run_dir))
    print(json.dumps(data, indent=2) if args.json else status_text(data))
    return 0


def cmd_inspect(args) -> int:
    from solrl_core.inspect import mlflow_link_text, pool_summary, shards_text
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_config import check_iteration, load_run_config

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


def cmd_eval(args) -> int:
    from solrl_core.run.integrity import verify_checkpoint
    from solrl_core.run.staleness import eval_stale_cause
    from solrl_core.run.rundir import RunDir
    from solrl_core.placement import check_devices
    from solrl_core.run_config import check_step, load_run_config

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
        from solrl.flows.tracking import log_evaluation

        log_evaluation(run, cfg, evaluation)
    else:
        check_devices(cfg, update=False)
        client_env()
        check_services(cfg, run)
        api = prefect_api()
        from solrl.flows.evaluation import evaluation_flow

        with api.ready():
            evaluation = evaluation_flow(str(run.root), step, progress=not args.quiet)
    print(f"evaluation after {plural(step, 'iteration')} ({'EMA' if evaluation['ema'] else 'policy'} weights, "
          f"{evaluation['samples']} samples):")
    for name, value in evaluation["metrics"].items():
        print(f"  eval/{name:<24} {value:.4f}")
    print(f"samples: {run.root / 'eval' / f'step_{step:04d}' / 'samples.png'}")
    return 0


def register(sub) -> None:
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
    output_options(p)
    p.set_defaults(func=cmd_eval)
