"""`solrl config`: the run-config schema explained (--explain [SECTION]) and a config as resolved (--show CONFIG)."""

from __future__ import annotations

import argparse

_EVERY_SECTION = object()  # `--explain` with no SECTION


def cmd_config(args) -> int:
    if args.show:
        from solrl_core.config.schema import dump_config
        from solrl_core.config.loading import load_config

        print(dump_config(load_config(args.show, args.set or [])), end="")
        return 0
    from solrl_core.config.explain import explain

    print(explain(None if args.explain is _EVERY_SECTION else args.explain), end="")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="explain the run-config keys, or print a config as resolved",
                       description="--explain [SECTION]: every key of the run config (or of one section, e.g. "
                       "train.optimizer): its type, default and what it means; official values are named. "
                       "--show CONFIG: the config after `extends` and --set, with every default filled in, as the "
                       "run would store it. The full reference: docs/config.md.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--explain", nargs="?", const=_EVERY_SECTION, metavar="SECTION",
                      help="a section (model, explore, explore.guardrail, train.optimizer, ...); none = all of them")
    what.add_argument("--show", metavar="CONFIG", help="a YAML config: a file or a packaged config's name, e.g. demo")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="with --show: override a config key")
    p.set_defaults(func=cmd_config)
