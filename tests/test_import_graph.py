"""No module of pql or tasks imports a module that imports it back, not even under TYPE_CHECKING
or inside a function: the contracts (pql/runtime/contracts.py, pql/algos/rules.py, tasks/base.py)
are subclassed where each runner, role, rules class and env is defined, never gathered in a
registry that imports them all, and the runtime imports no command-line module.

An edge is any import statement of a module: at its top level, in a module-level `if`
(TYPE_CHECKING included) or `try`, and inside a function or class. An import inside a function
cannot fail at import time (it is how the command line keeps torch out of `--help`), but two
modules that import each other, however late, are one module split in two. Only an import under
`if __name__ == "__main__":` is left out: it is made when the module runs as a program, as the
program's own start."""

import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def modules() -> dict[str, str]:
    """{dotted name: path} of every module of the pql and tasks packages."""
    found = {}
    for folder, _, files in (entry for package in ("pql", "tasks") for entry in os.walk(os.path.join(ROOT, package))):
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


def _import_statements(body: list[ast.stmt]):
    """Every import statement in `body` and the blocks nested in it, but for a __main__ guard's."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif not _main_guard(node):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    yield from _import_statements([child])
                elif isinstance(child, ast.ExceptHandler):
                    yield from _import_statements(child.body)


def imported(name: str, path: str, known: dict[str, str]) -> set[str]:
    """The modules of `known` that module `name` imports (_import_statements)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    targets = set()
    for node in _import_statements(tree.body):
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
    assert "pql.runtime.contracts" in graph and "tasks.base" in graph
    assert graph["pql.algos.pql"] >= {"pql.algos.rules"}  # the edges are read
    assert "pql.runtime.run" in graph["pql.cli"]  # so are the imports inside functions
    assert cycles(graph) == []


def test_imports_inside_functions_and_classes_are_edges_and_a_main_guards_are_not():
    source = (
        "import pql.a\n"
        "def f():\n    from pql import b\n"
        "class C:\n    def g(self):\n        try:\n            import pql.c\n        except ImportError:\n"
        "            import pql.d\n"
        "if __name__ == '__main__':\n    import pql.e\n"
    )
    found = {alias.name for node in _import_statements(ast.parse(source).body) for alias in node.names}
    assert found == {"pql.a", "b", "pql.c", "pql.d"}


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
        for node in _import_statements(ast.parse(source).body)
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
