"""docs/architecture.md's walk, "One iteration, file by file", against the code: at most 12 files, each one there
with the function it names, and each reached from the walk before it (imported by an earlier file), so that a
reader who follows the imports from `solrl train` to the pool writer meets no file the walk leaves out."""

from __future__ import annotations

import ast
import re

from repo_paths import ROOT
from test_import_graph import module_of, import_graph

ARCHITECTURE = ROOT / "docs" / "architecture.md"
MOST_FILES = 12
ENTRY = re.compile(r"^\d+\. `([^`]+\.py)`: `([^`]+)`", re.MULTILINE)


def walk() -> list[tuple[str, str]]:
    """(file, the function or method it names) of each numbered entry of the walk, in order."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## One iteration, file by file", 1)[1].split("\n## ", 1)[0]
    return ENTRY.findall(section)


def defines(path, dotted: str) -> bool:
    """Whether the file at `path` defines `dotted` (`name`, or `Class.method`)."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    for part in dotted.split("."):
        found = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
        if found is None:
            return False
        body = found.body
    return True


def test_the_walk_is_at_most_twelve_files_each_defining_what_it_names():
    entries = walk()
    assert 8 <= len(entries) <= MOST_FILES, entries
    for file, name in entries:
        assert (ROOT / file).is_file(), file
        assert defines(ROOT / file, name), f"{file} does not define {name}"


def test_each_file_of_the_walk_is_imported_by_one_before_it():
    graph = import_graph()
    modules = [module_of(ROOT / file) for file, _ in walk()]
    for i, module in enumerate(modules[1:], start=1):
        importers = [m for m in modules[:i] if module in graph[m]]
        assert importers, f"{module} (entry {i + 1}) is imported by no file before it in the walk"


def test_a_wrong_walk_is_caught(tmp_path):
    assert not defines(ROOT / "solrl_core" / "method.py", "run_explore")
    assert defines(ROOT / "solrl_core" / "stages" / "sampling.py", "PoolSampling.sample")
    assert not defines(ROOT / "solrl_core" / "stages" / "sampling.py", "PoolSampling.nope")
