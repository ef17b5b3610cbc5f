"""The import graph of solrl_core, tasks and flows, read from the sources with `ast`: no cycles, and the library
never imports the orchestration (prefect) or tracking (mlflow) packages.

An edge A -> B is any `import` of B in A, at module level or inside a function (a function-local import that
closes a loop is a cycle too, only a hidden one); `if TYPE_CHECKING:` imports never run and are not edges. An import
of `pkg.mod` is an edge to that module, not to its parent packages' `__init__`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("solrl_core", "tasks", "flows")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_names(module: str) -> list[tuple[str, int]]:
    """(dotted name, line) of every import in `module` that runs."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                for orelse in child.orelse:
                    visit(orelse)
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package
                    for _ in range(child.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                for alias in child.names:  # `from pkg import mod` names the module; `from mod import f`, mod
                    name = f"{base}.{alias.name}"
                    found.append((name if name in MODULES else base, child.lineno))
            visit(child)

    visit(ast.parse(path.read_text(), filename=str(path)))
    return found


def _own_module(name: str) -> str | None:
    """The module of ours that importing `name` loads (`a.b.C` -> `a.b`), or None for a third-party name."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module of ours: first line importing it}."""
    graph: dict[str, dict[str, int]] = {}
    for module in MODULES:
        edges = graph.setdefault(module, {})
        for name, line in imported_names(module):
            target = _own_module(name)
            if target is not None and target != module:
                edges.setdefault(target, line)
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle [a, b, ..., a] of the graph, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in graph:
        if start in state:
            continue
        path, iters = [start], [iter(graph[start])]
        state[start] = 1
        while path:
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                iters.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(graph[nxt]))
    return None


def test_the_graph_is_read():
    graph = import_graph()
    assert len(graph) > 50
    assert "solrl_core.stages.context" in graph["solrl_core.stages.update"]
    assert "solrl_core.stages.update" in graph["solrl_core.stages.update_worker"]


def test_find_cycle_names_a_cycle():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert find_cycle({"a": {"b": 1}, "b": {}, "c": {"a": 1, "b": 1}}) is None


def test_no_import_cycles():
    graph = import_graph()
    cycle = find_cycle(graph)
    if cycle is not None:
        steps = [f"{a} (line {graph[a][b]}) -> {b}" for a, b in zip(cycle, cycle[1:])]
        raise AssertionError("import cycle: " + "; ".join(steps))


def test_the_library_imports_neither_prefect_nor_mlflow():
    offenders = [f"{module}:{line} imports {name}" for module in MODULES if module.startswith("solrl_core")
                 for name, line in imported_names(module) if name.split(".")[0] in ("prefect", "mlflow")]
    assert offenders == []
