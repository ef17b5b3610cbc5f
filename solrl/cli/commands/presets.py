"""`solrl presets`: the configs shipped in the package (the official presets, the demo, bench and family configs),
and one of them written to an editable file (a preset's headed by what its settings are)."""

from __future__ import annotations

from pathlib import Path

from solrl_core.errors import SolrlError


def config_rows() -> tuple[list[dict], list[dict]]:
    """(run configs, bench configs) shipped in the package, one row each: a run config's name, model, family and
    trained reward(s); a bench config's name and the family configs it trains."""
    from solrl_core.config.loading import config_kind, load_config
    from solrl_core.config.sources import packaged_configs
    from solrl_core.config.presets import preset_models

    from solrl_core.config.learning_status import cell_status, learning_label, read_status

    models = preset_models()
    status = read_status()
    runs, benches = [], []
    for name, path in packaged_configs().items():
        kind, data = config_kind(path)
        if kind == "bench":  # solrl_core/bench/bench_config.py: its family configs are files beside it
            families = ", ".join(Path(f).stem for f in data["families"])
            benches.append({"name": name, "families": families, "run": f"solrl bench {name}"})
            continue
        if kind == "matrix":  # a learning matrix (solrl_core/bench/matrix_config.py): its worlds' families
            families = "; ".join(f"{world}: " + ", ".join(Path(f).stem for f in spec.get("families", []))
                                 for world, spec in data["worlds"].items())
            benches.append({"name": name, "families": families, "run": f"solrl matrix {name}"})
            continue
        cfg = load_config(path)
        runs.append({"name": name, "model": models.get(name, cfg.model.kind), "family": cfg.family,
                     "objective": cfg.objective.name, "reward": "+".join(r for r, w in cfg.rewards.items() if w),
                     "learning": learning_label(cell_status(cfg, status)[1])})
    return runs, benches


def write_preset(name: str, file: Path, overrides: list[str], force: bool = False) -> Path:
    """Write the run config `name` (a packaged name or a file), resolved as `solrl config --show` prints it (every
    key, no `extends`), to `file`: it works anywhere, whatever happens to the package later."""
    from solrl_core.config.schema import dump_config
    from solrl_core.config.loading import config_kind, load_config
    from solrl_core.config.presets import describe, preset_at
    from solrl_core.config.sources import resolve_config
    from solrl_core.userfiles import check_output_file

    source = resolve_config(name)
    kind, _ = config_kind(source)
    if kind != "run":
        raise SolrlError(f"{name} is a {kind} config, whose family configs are files beside it: run it by name "
                         f"(solrl {kind} {name}); --write writes run configs")
    if file.exists() and not force:
        raise SolrlError(f"{file} exists; give another FILE or --force to replace it")
    check_output_file(file, "--write")  # where it goes, before the config is resolved
    text = dump_config(load_config(source, overrides))
    preset = preset_at(source)
    file.parent.mkdir(parents=True, exist_ok=True)
    sets = "".join(f" --set {o}" for o in overrides)
    file.write_text((describe(preset.name) if preset else "")
                    + f"# `solrl presets --write {name} {file.name}{sets}`: the config resolved (every key, defaults "
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
    print(format_table(runs, ["name", "model", "family", "objective", "reward", "learning"]))
    print("\nbench and learning-matrix configs:")
    print(format_table(benches, ["name", "families", "run"]))
    print("\nlearning: what the learning matrix measured of the config's objective x family on the embedded testbed "
          "(rises: its held-out reward rose, the 95% interval over seeds above 0; experimental: it did not, or was "
          "not trained there; `solrl train` says which, with the numbers; configs/measured/learning_status.yaml)")
    print("a file path works wherever a NAME does (a file that exists wins); to edit one: "
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
