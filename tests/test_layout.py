"""The shape of the tree (issue 15): no import cycles between modules, modules of a readable
size, and a `tile/` whose top level holds only what every stage shares.

Import-linter checks the layers between packages (`make lint`); this test checks what it
does not: a cycle between two modules of one package, counting imports inside functions and
`importlib.import_module("...")` calls, but not imports under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("tile", "semtree", "hal", "hal_opencl", "hal_llvm")
MAX_LINES = 500


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imported(path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `path` imports at run time."""
    tree = ast.parse(path.read_text())
    type_only = {
        id(node)
        for statement in ast.walk(tree)
        if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test)
        for body in statement.body
        for node in ast.walk(body)
    }
    names: list[str] = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from package import module` imports that module (every import of a module
            # runs its packages' __init__ first, which is not an edge of its own).
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names.append(submodule if submodule in known else node.module)
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.append(str(node.args[0].value))
    result = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            result.add(name)
    return result


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    known = modules()
    graph = {}
    for name, path in known.items():
        # A package's __init__ may re-export its modules; a module importing its own
        # package's __init__ is what would close a circle through it.
        graph[name] = {other for other in imported(path, known) if other != name}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_modules_stay_readable() -> None:
    long = {
        str(path.relative_to(REPO)): count
        for path in modules().values()
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_tile_top_level_holds_only_what_every_stage_shares() -> None:
    top = sorted(path.name for path in (REPO / "tile").glob("*.py"))
    assert len(top) <= 6, top
    stages = {"lang", "bind", "lower", "runtime", "cli"}
    assert stages <= {path.name for path in (REPO / "tile").iterdir() if path.is_dir()}
