"""`solrl presets`: the configs shipped in the package (the official presets, the demo, bench and family configs),
and one of them written to an editable file."""

from __future__ import annotations

from pathlib import Path

from solrl_core.errors import SolrlError


def config_rows() -> tuple[list[dict], list[dict]]:
    """(run configs, bench configs) shipped in the package, one row each: a run config's name, model, family and
    trained reward(s); a bench config's name and the family configs it trains."""
    from solrl_core.config.schema import load_yaml
    from solrl_core.config.loading import load_config
    from solrl_core.config.packaged import packaged_configs
    from solrl_core.config.presets import preset_models

    models = preset_models()
    runs, benches = [], []
    for name, path in packaged_configs().items():
        own = load_yaml(path.read_text(encoding="utf-8")) or {}
        if "families" in own:  # a bench config (solrl_core/bench/bench_config.py): its family configs are files beside it
            families = ", ".join(Path(f).stem for f in own["families"])
            benches.append({"name": name, "families": families, "run": f"solrl bench {name}"})
            continue
        cfg = load_config(path)
        runs.append({"name": name, "model": models.get(name, cfg.model.kind), "family": cfg.family,
                     "objective": cfg.objective.name, "reward": "+".join(r for r, w in cfg.rewards.items() if w)})
    return runs, benches


def write_preset(name: str, file: Path, overrides: list[str], force: bool = False) -> Path:
    """Write the run config `name` (a packaged name or a file), resolved as `solrl config --show` prints it (every
    key, no `extends`), to `file`: it works anywhere, whatever happens to the package later."""
    from solrl_core.config.schema import dump_config, load_yaml
    from solrl_core.config.loading import load_config
    from solrl_core.config.packaged import resolve_config

    source = resolve_config(name)
    if "families" in (load_yaml(source.read_text(encoding="utf-8")) or {}):
        raise SolrlError(f"{name} is a bench config, whose family configs are files beside it: run it by name "
                         f"(solrl bench {name}); --write writes run configs")
    if file.exists() and not force:
        raise SolrlError(f"{file} exists; give another FILE or --force to replace it")
    text = dump_config(load_config(source, overrides))
    file.parent.mkdir(parents=True, exist_ok=True)
    sets = "".join(f" --set {o}" for o in overrides)
    file.write_text(f"# `solrl presets --write {name} {file.name}{sets}`: the config resolved (every key, defaults "
                    "filled in).\n# Edit it and run `solrl train FILE`; `solrl config --explain` says what each key "
                    "means.\n" + text, encoding="utf-8")
    return file


def cmd_presets(args) -> int:
    if args.write:
        name, file = args.write
        written = write_preset(name, Path(file), args.set or [], force=args.force)
        print(f"wrote {name} to {written}; edit it, then: solrl train {written}")
        return 0
    if args.set or args.force:
        raise SolrlError("--set and --force go with --write NAME FILE")
    from solrl_core.rewards.commands import format_table

    runs, benches = config_rows()
    print("run configs (solrl train NAME, solrl plan NAME --gpu GPU, solrl config --show NAME, ...):")
    print(format_table(runs, ["name", "model", "family", "objective", "reward"]))
    print("\nbench configs:")
    print(format_table(benches, ["name", "families", "run"]))
    print("\na file path works wherever a NAME does (a file that exists wins); to edit one: "
          "solrl presets --write NAME FILE")
    return 0


def register(sub) -> None:
    p = sub.add_parser("presets", help="list the configs shipped with solrl, or write one to an editable file",
                       description="List the configs shipped in the package, by the name every command that takes a "
                       "CONFIG accepts (solrl train, deploy, bench, plan, config --show, rewards check --config): the "
                       "official presets <model>_<family>_<reward> (docs/method.md), the same with Flow-GRPO or AWM as "
                       "<objective>/<model>_<family>_<reward>, the demo configs, the family "
                       "configs of the benchmark and the bench config. --write NAME FILE writes one as resolved "
                       "(every key, defaults filled in, no `extends`), a file to edit that works anywhere.")
    p.add_argument("--write", nargs=2, metavar=("NAME", "FILE"),
                   help="write the config NAME (a packaged name or a file) to FILE, resolved")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="with --write: override a config key in the written file (repeatable)")
    p.add_argument("--force", action="store_true", help="with --write: replace FILE when it exists")
    p.set_defaults(func=cmd_presets)
