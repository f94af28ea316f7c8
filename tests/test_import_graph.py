"""No module of pql imports a module that imports it back, not even under TYPE_CHECKING: the
contracts (pql/runtime/contracts.py, pql/algos/rules.py) are subclassed where each runner, role
and rules class is defined, never gathered in a registry that imports them all.

An edge is an import made when the module is imported: at its top level, in a module-level `if`
(TYPE_CHECKING included) or `try`. An import inside a function is made when it is called, which
is how the command line keeps torch out of `--help`, and one under `if __name__ == "__main__":`
only when the module runs as a program; neither can close a circle at import time."""

import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def modules() -> dict[str, str]:
    """{dotted name: path} of every module of the pql package."""
    found = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "pql")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                found[dotted.removesuffix(".__init__")] = path
    return found


def _main_guard(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


def _import_time_statements(body: list[ast.stmt]):
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and not _main_guard(node):
            yield from _import_time_statements(node.body)
            yield from _import_time_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _import_time_statements(block)


def imported(name: str, path: str, known: dict[str, str]) -> set[str]:
    """The pql modules that module `name` imports at import time."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    targets = set()
    for node in _import_time_statements(tree.body):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
        targets.add(base)
        targets.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    edges = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            edges.add(target)
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_one_that_imports_it_back():
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert "pql.runtime.contracts" in graph and "pql.algos.rules" in graph
    assert graph["pql.algos.pql"] >= {"pql.algos.rules"}  # the edges are read
    assert cycles(graph) == []


def test_a_registry_under_type_checking_would_be_a_cycle():
    """The check sees what mypy sees: a contracts module importing its implementations back."""
    graph = {
        "pql.algos.rules": {"pql.nets"},
        "pql.algos.pql": {"pql.algos.rules"},
        "pql.nets": set(),
    }
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pql.algos.pql import PQL\n"
    tree_edges = {
        node.module
        for node in _import_time_statements(ast.parse(source).body)
        if isinstance(node, ast.ImportFrom) and node.module != "typing"
    }
    graph["pql.algos.rules"] |= tree_edges
    assert cycles(graph) == [["pql.algos.pql", "pql.algos.rules"]]


def test_importing_the_config_imports_no_torch():
    """train.py reads the command line and the config before torch: Isaac Gym must be imported
    first (pql.cli.import_isaacgym_first)."""
    code = "import sys, pql.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"
