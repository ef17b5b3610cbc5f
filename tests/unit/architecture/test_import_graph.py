"""The import graph of solrl_core and solrl (its command line, flows, tasks and configs), read from the sources with `ast`: no cycles, every import runs
downward through the layers of LAYERS (the architecture: the method on top of the pieces it runs on, the run
directory machinery below them, orchestration above, lab tooling apart), and the library never imports the
orchestration (prefect) or tracking (mlflow) packages.

An edge A -> B is any `import` of B in A: at module level, inside a function (a function-local import that closes a
loop is a cycle too, only a hidden one) or under `if TYPE_CHECKING:` (a type-only import still makes A's reader read
B). An import of `pkg.mod` is an edge to that module, not to its parent packages' `__init__`."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from solrl.layout import UNDER_SOLRL

# The installed packages and where their sources are: solrl.flows, solrl.tasks and solrl.configs are the checkout's
# top folders flows/, tasks/ and configs/ (solrl/layout.py), so a module's name is read from the package, not its path.
PACKAGES = ("solrl_core", "solrl", *(f"solrl.{folder}" for folder in UNDER_SOLRL))
FOLDERS = {package: Path(importlib.import_module(package).__file__).parent for package in PACKAGES}


def _module_name(package: str, path: Path) -> str:
    parts = list(path.relative_to(FOLDERS[package]).with_suffix("").parts)
    return ".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])


def module_of(path: Path) -> str:
    """The dotted name of the source file `path` (solrl/cli/main.py -> solrl.cli.main, flows/stage.py ->
    solrl.flows.stage)."""
    path = path.resolve()
    package = max((p for p, folder in FOLDERS.items() if path.is_relative_to(folder)), key=lambda p: len(FOLDERS[p].parts))
    return _module_name(package, path)


MODULES = {_module_name(pkg, p): p for pkg in PACKAGES for p in sorted(FOLDERS[pkg].rglob("*.py"))}


# The layers, bottom up: a module belongs to the layer of the longest prefix naming it, and imports only from its own
# layer or those below. docs/architecture.md draws the same picture.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground floor", ("solrl_core", "solrl_core.errors", "solrl_core.wording", "solrl_core.excerpts", "solrl_core.stop",
                      "solrl_core.quiet", "solrl_core.plugins", "solrl_core.userfiles", "solrl_core.orphan_guard",
                      "solrl_core.run.stage_table", "solrl_core.config.limits", "solrl_core.config.packaged",
                      "solrl_core.renamed", "solrl", "solrl.configs")),
    ("run directory", ("solrl_core.run",)),
    ("config schema", ("solrl_core.config.schema",)),
    ("pieces", ("solrl_core.models", "solrl_core.rewards", "solrl_core.rl", "solrl_core.prompts",
                "solrl_core.placement", "solrl_core.grids", "solrl_core.eval_metrics", "solrl_core.testing")),
    ("checked config", ("solrl_core.config",)),
    ("stages", ("solrl_core.stages", "solrl_core.evaluate", "solrl_core.run_config", "solrl_core.inspect",
                "solrl_core.status", "solrl_core.learning_curve", "solrl_core.pool_plots", "solrl_core.run_preflight",
                "solrl_core.planner", "solrl_core.mlflow_links")),
    ("method", ("solrl_core.method", "solrl_core.stages.runner")),
    ("product tools", ("solrl_core.doctor", "solrl_core.bench", "solrl_core.tiny_bundle")),
    ("lab", ("solrl_core.lab",)),
    ("tasks", ("solrl.tasks",)),
    ("flows", ("solrl.flows",)),
    ("lab flows", ("solrl.flows.lab",)),
    ("command line", ("solrl.cli", "solrl.__main__")),
)
UPWARD_ALLOWED: set[tuple[str, str]] = set()  # (importer, imported) pairs that may run upward: none


def layer_of(module: str) -> int | None:
    """The index in LAYERS of `module`'s layer (its longest matching prefix), or None."""
    best: tuple[int, int | None] = (-1, None)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                best = (len(prefix), index)
    return best[1]


def imported_names(module: str) -> list[tuple[str, int]]:
    """(dotted name, line) of every import in `module`, type-only ones included."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
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


def test_nothing_imports_a_top_level_flows_tasks_or_configs():
    """Those names are a user's own packages now: solrl's are solrl.flows, solrl.tasks and solrl.configs."""
    offenders = [f"{module}:{line} imports {name}" for module in MODULES for name, line in imported_names(module)
                 if name.split(".")[0] in ("flows", "tasks", "configs")]
    assert offenders == []
    assert {"solrl.flows.iteration", "solrl.tasks.stage_task", "solrl.cli.main", "solrl.configs"} <= set(MODULES)


def test_a_type_only_import_is_an_edge(tmp_path):
    assert "solrl_core.run.rundir" in import_graph()["solrl_core.run.staleness"]  # under `if TYPE_CHECKING:`


def test_every_module_has_a_layer():
    assert [module for module in MODULES if layer_of(module) is None] == []


def test_imports_run_downward():
    graph = import_graph()
    upward = [f"{a}:{line} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
              for a, edges in graph.items() for b, line in edges.items()
              if layer_of(b) > layer_of(a) and (a, b) not in UPWARD_ALLOWED]
    assert upward == []


def test_the_product_never_imports_the_lab():
    lab = ("solrl_core.lab", "solrl.flows.lab")
    in_lab = lambda module: any(module == p or module.startswith(p + ".") for p in lab)  # noqa: E731
    product_cli = {"solrl.cli.commands.pretrain", "solrl.cli.commands.distill"}  # `solrl pretrain`, `solrl distill-reward`
    offenders = [f"{a} imports {b}" for a, edges in import_graph().items() for b in edges
                 if in_lab(b) and not in_lab(a) and a not in product_cli]
    assert offenders == []


# The pieces' packages, each a unit another may build on in one direction only: rl and rewards use models, models
# uses the prompts; none of them is used by a package it uses. What they all share sits on the ground floor (the
# embedded worlds, solrl_core.worlds; the seed derivation, solrl_core.seeds).
PIECES = ("solrl_core.models", "solrl_core.rewards", "solrl_core.rl", "solrl_core.prompts")


def _piece(module: str) -> str | None:
    return next((p for p in PIECES if module == p or module.startswith(p + ".")), None)


def piece_edges(graph: dict[str, dict[str, int]]) -> dict[tuple[str, str], str]:
    """(importing piece, imported piece) -> one import that makes the edge ("module:line -> module")."""
    edges: dict[tuple[str, str], str] = {}
    for a, imports in graph.items():
        for b, line in imports.items():
            pa, pb = _piece(a), _piece(b)
            if pa and pb and pa != pb:
                edges.setdefault((pa, pb), f"{a}:{line} -> {b}")
    return edges


def test_no_two_pieces_import_each_other():
    edges = piece_edges(import_graph())
    both_ways = [f"{edges[(a, b)]} and {edges[(b, a)]}" for a, b in edges if (b, a) in edges and a < b]
    assert both_ways == []
    assert ("solrl_core.rl", "solrl_core.models") in edges  # the test reads real edges


def test_two_way_pieces_are_named():
    graph = {"solrl_core.models.a": {"solrl_core.rl.b": 3}, "solrl_core.rl.b": {"solrl_core.models.a": 7}}
    edges = piece_edges(graph)
    assert edges == {("solrl_core.models", "solrl_core.rl"): "solrl_core.models.a:3 -> solrl_core.rl.b",
                     ("solrl_core.rl", "solrl_core.models"): "solrl_core.rl.b:7 -> solrl_core.models.a"}
