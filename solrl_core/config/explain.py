"""The run-config schema as text: `solrl config --explain [SECTION]` and the reference table docs/config.md.

Everything is read from the pydantic schema in solrl_core/config/schema.py (field names, types, defaults, descriptions),
so the explanation and the document cannot drift from what validation accepts. Regenerate the document with
    python -m solrl_core.config.explain --write docs/config.md      (--check docs/config.md only compares)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from solrl_core.config.schema import RunConfig
from solrl_core.errors import ConfigError
from solrl_core.excerpts import cut

def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def sections(model: type[BaseModel] = RunConfig, prefix: str = "") -> dict[str, type[BaseModel]]:
    """Every section of the schema by dotted name, in declaration order: "" (the top level), "model", ...,
    "train.optimizer", ..."""
    out = {prefix: model}
    for name, field in model.model_fields.items():
        if _is_section(field.annotation):
            out.update(sections(field.annotation, f"{prefix}.{name}" if prefix else name))
    return out


def type_name(annotation: Any) -> str:
    """A YAML reader's name of a field type: `int | null`, `best_worst | random | ...`, `list[str]`, `section`."""
    if annotation is None or annotation is type(None):
        return "null"
    if _is_section(annotation):
        return "section"
    origin = get_origin(annotation)
    if origin is Annotated:  # StrictInt and the like: the type they constrain
        return type_name(get_args(annotation)[0])
    if origin is Literal:
        return " | ".join(str(a) for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in get_args(annotation))
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(a) for a in get_args(annotation))}]"
    return {"str": "str", "int": "int", "float": "float", "bool": "bool"}.get(annotation.__name__, annotation.__name__)


def default_text(field: FieldInfo) -> str:
    """The default as it would be written in YAML (flow style): null, true, 0.0003, [0.9, 0.999], {embedded: 1.0}."""
    if _is_section(field.annotation):
        return "(its own section)"
    value = field.get_default(call_default_factory=True)
    return _yaml_flow(value)


def _yaml_flow(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return value if yaml.safe_load(value) == value else json.dumps(value)  # quoted only where YAML needs it
    return repr(value)


def field_rows(section: str) -> list[dict[str, str]]:
    """The fields of `section` (dotted, "" = top level): key, type, default, description. An unknown section is a
    ConfigError naming the known ones."""
    known = sections()
    if section not in known:
        names = ", ".join(s for s in known if s)
        raise ConfigError(f"unknown config section '{cut(section)}'; sections: {names}")
    prefix = f"{section}." if section else ""
    return [{"key": prefix + name, "type": type_name(field.annotation), "default": default_text(field),
             "description": field.description or ""}
            for name, field in known[section].model_fields.items()]


def _section_title(section: str) -> str:
    if not section:
        return "top level"
    parent, _, name = section.rpartition(".")
    field = sections()[parent].model_fields[name]
    return f"{section}: {field.description}"


def explain(section: str | None = None, width: int | None = None) -> str:
    """Readable text of one section's fields (None = every section): per field `key: type = default`, then its
    description indented and wrapped to `width` columns (default: the terminal's, at most 100)."""
    width = width or min(shutil.get_terminal_size((100, 24)).columns, 100)
    names = list(sections()) if section is None else [section]
    blocks = []
    for name in names:
        rows = field_rows(name)
        lines = [_section_title(name), "=" * min(len(_section_title(name)), width)]
        for row in rows:
            lines.append(f"{row['key']}: section (solrl config --explain {row['key']})" if row["type"] == "section"
                         else f"{row['key']}: {row['type']} = {row['default']}")
            lines += textwrap.wrap(row["description"], width, initial_indent="    ", subsequent_indent="    ")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """docs/config.md: one table per section (key, type, default, description)."""
    out = [
        "# Run configuration reference",
        "",
        "Generated from the schema in `solrl_core/config/schema.py` by `python -m solrl_core.config.explain --write "
        "docs/config.md`; do not edit by hand (a test compares it with the generator). In a terminal: "
        "`solrl config --explain [SECTION]`, e.g. `solrl config --explain train.optimizer`.",
        "",
        "A config file may start from others with `extends:`; `--set key.path=value` overrides a key from the command "
        "line. `official` in a description is the value of the paper's runs (docs/method.md); the official presets "
        "(`solrl presets`) carry them.",
    ]
    for name in sections():
        out += ["", f"## {'`' + name + '`' if name else 'Top level'}", ""]
        if name:
            parent, _, leaf = name.rpartition(".")
            out += [sections()[parent].model_fields[leaf].description or "", ""]
        out += ["| key | type | default | description |", "|---|---|---|---|"]
        out += [f"| `{r['key']}` | {_cell(r['type'])} | `{_cell(r['default'])}` | {_cell(r['description'])} |"
                for r in field_rows(name)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solrl_core.config.explain",
                                     description="Write or check the run-config reference (docs/config.md).")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", type=Path, metavar="PATH", help="write the reference here (docs/config.md)")
    action.add_argument("--check", type=Path, metavar="PATH", help="only compare; exit 1 when PATH is out of date")
    args = parser.parse_args(argv)
    text = markdown()
    if args.check:
        current = args.check.read_text(encoding="utf-8") if args.check.is_file() else None
        print(f"{args.check} is up to date" if current == text else
              f"{args.check} is out of date: python -m solrl_core.config.explain --write {args.check}")
        return 0 if current == text else 1
    args.write.write_text(text, encoding="utf-8")
    print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
