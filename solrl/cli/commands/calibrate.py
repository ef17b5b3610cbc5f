"""`solrl calibrate-explore CONFIG`: which explore policy (precision, steps, step cache) still ranks the seeds as the
regenerate setting would, and what each costs (solrl_core/planner/explore_policies.py)."""

from __future__ import annotations

import json
from pathlib import Path

from solrl_core.errors import SolrlError


def cmd_calibrate_explore(args) -> int:
    from solrl_core.config.loading import load_config
    from solrl_core.planner import explore_policies as ep
    from solrl_core.planner.gpus import get_gpu

    for option, value, low, what in (("--prompts", args.prompts, 1, "prompts"),
                                      ("--seeds", args.seeds, 2, "seeds per prompt (a ranking needs two)"),
                                      ("--batch-size", args.batch_size, 1, "samples per batch"),
                                      ("--seed-offset", args.seed_offset, 0, "an offset")):
        if value < low:  # checked before any sampling, as everything below
            raise SolrlError(f"{option} {value}: give {low} or more {what}")
    if not -1.0 <= args.min_spearman <= 1.0:
        raise SolrlError(f"--min-spearman {args.min_spearman:g}: a rank correlation lies from -1 to 1")
    gpus = tuple(args.gpu or ep.DEFAULT_GPUS)
    for gpu in gpus:
        get_gpu(gpu)  # an unknown name says so now, not after the sampling
    if args.price_as:
        from solrl_core.planner.flops import get_model

        get_model(args.price_as)
    if args.write and Path(args.write).exists() and not args.force:
        raise SolrlError(f"{args.write} exists; give another FILE or --force to replace it")
    from solrl_core.userfiles import check_output_dir, check_output_file

    if args.write:
        check_output_file(args.write, "--write")
    if args.out:
        check_output_dir(args.out, "--out")
    cfg = load_config(args.config, args.set or [])
    out = Path(args.out or Path("runs") / "calibrate-explore" / cfg.name)
    siblings = [*(args.sibling or []), *([cfg.explore.sibling.path] if cfg.explore.sibling.path else [])]
    siblings = tuple(dict.fromkeys(str(Path(s).resolve()) if Path(s).exists() else s for s in siblings))
    say = None if args.quiet else (lambda line: print(line, flush=True))
    result = ep.calibrate(cfg, args.prompts, args.seeds, gpus, batch_size=args.batch_size,
                          seed_offset=args.seed_offset, progress=not args.quiet, siblings=siblings, keep=out,
                          say=say, price_as=args.price_as)
    chosen = ep.pick(result, args.min_spearman)
    result["min_spearman"], result["chosen"] = args.min_spearman, chosen["label"] if chosen else None
    out.mkdir(parents=True, exist_ok=True)
    table = ep.format_table(result, chosen)
    (out / "table.md").write_text(table + "\n", encoding="utf-8")
    (out / "result.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    png = ep.plot(result, out / "pareto.png", chosen, args.min_spearman)
    print(table)
    print(f"\nwritten: {out / 'table.md'}, {out / 'result.json'}, {png}")
    if chosen is None:
        best = max(result["rows"], key=lambda r: r["spearman_within_prompt_low"])
        raise SolrlError(f"no policy reaches Spearman {args.min_spearman:g} within prompt at the lower end of its 95% "
                         f"interval (the best: {best['label']}, {best['spearman_within_prompt_low']:.3f}); lower "
                         "--min-spearman, or give more --prompts")
    print(f"chosen (cheapest on {gpus[0]} whose Spearman within prompt is >= {args.min_spearman:g} at the lower end of "
          f"its 95% interval): {chosen['label']}: {chosen['spearman_within_prompt']:.3f} "
          f"[{chosen['spearman_within_prompt_low']:.3f}, {chosen['spearman_within_prompt_high']:.3f}], "
          f"{chosen['modelled_seconds'][gpus[0]]:.3g} modelled s")
    if args.write:
        Path(args.write).write_text(
            f"# `solrl calibrate-explore {args.config}`: {cfg.name} with the explore policy {chosen['label']} (Spearman "
            f"within prompt {chosen['spearman_within_prompt']:.3f} on {result['prompts']} prompts x "
            f"{result['seeds_per_prompt']} seeds), the fidelity guardrail on.\n" + ep.written_config(cfg, chosen),
            encoding="utf-8")
        print(f"wrote {args.write}; train it: solrl train {args.write}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("calibrate-explore", help="rank explore policies by fidelity and cost; write the cheapest "
                       "that ranks seeds right",
                       description="Sample one calibration batch (prompts x seeds) with the config's base model under "
                       "each candidate explore policy (precision: 4-bit, 8-bit, full; steps: half the explore's, the "
                       "explore's, between, the regenerate's; cache: none, TaylorSeer; model: the trained one, or "
                       "a --sibling at 1, 2, 4 steps; for a video model a decode at half scale and of the scored frames "
                       "alone) and under the regenerate "
                       "setting, and report per policy: the within-prompt Spearman and Kendall of its rewards "
                       "against the regenerate's, the overlap of the K/2 best and worst seeds it would keep, the "
                       "seconds it took here, and the planner's modelled explore seconds per GPU kind. Writes "
                       "table.md, result.json and pareto.png; --write FILE writes the config with the cheapest policy "
                       "that reaches --min-spearman, its fidelity guardrail on. Each policy's rewards are kept in "
                       "DIR/measured/ as it finishes: stopped and run again, it resumes at the first policy not "
                       "measured (the same config and batch; anything else measures again).")
    p.add_argument("config", metavar="CONFIG", help="a run config: a file or a packaged name (solrl presets)")
    p.add_argument("--prompts", type=int, default=16, help="prompts in the calibration batch (default 16)")
    p.add_argument("--seeds", type=int, default=24, help="seeds per prompt (default 24)")
    p.add_argument("--seed-offset", type=int, default=0, help="another offset gives fresh seeds (default 0)")
    p.add_argument("--batch-size", type=int, default=48, help="samples per forward batch (default 48)")
    p.add_argument("--gpu", action="append", metavar="NAME",
                   help="GPU kinds to model the cost on, the first one chooses (repeatable; default h100, b200)")
    p.add_argument("--min-spearman", type=float, default=0.8,
                   help="the within-prompt Spearman a policy must reach, at the lower end of its 95%% interval over "
                   "prompts, to be chosen (default 0.8)")
    p.add_argument("--out", metavar="DIR", help="where the table, JSON, plot and the measured rewards go (default "
                   "runs/calibrate-explore/<config name>)")
    p.add_argument("--write", metavar="FILE", help="write the config with the chosen policy to FILE")
    p.add_argument("--force", action="store_true", help="with --write: replace FILE when it exists")
    p.add_argument("--sibling", action="append", metavar="PATH",
                   help="also calibrate exploring with this sibling model (explore.sibling.path: a smaller or "
                   "step-distilled model of the same kind; repeatable; the config's own sibling is always included)")
    p.add_argument("--model", dest="price_as", metavar="MODEL", help="model the explore seconds on this full-size "
                   "backbone at its own shapes, VAE decode and reward included, as `solrl plan CONFIG --model` does, "
                   "while ranking on the config's model: the embedded models decode nothing (their latent is the "
                   "image), so a cheaper explore decode is priced on the model it is for (e.g. --model wan)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--quiet", action="store_true", help="no progress bars, no line per policy")
    p.set_defaults(func=cmd_calibrate_explore)
